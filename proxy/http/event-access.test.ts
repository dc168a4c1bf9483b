import { describe, expect, it } from "vitest";
import { parseScope } from "../../contracts/access.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";
import type { Principal } from "./api-tokens.ts";
import { sessionLabels, sessionVisibility } from "./event-access.ts";

/** Agent sessions by id, each in a container; workspaces by container with their workstream. */
const sessions: Record<string, { agent_ref: string; container_name: string }> = {
  "sess-now": { agent_ref: "default/alice", container_name: "c-harness" },
  "sess-before-restart": { agent_ref: "default/alice", container_name: "c-harness" },
  "sess-rpc": { agent_ref: "default/bob", container_name: "c-rpc" },
};
const workspaces: Record<string, { workstream: string }> = {
  "c-harness": { workstream: "harness-s" },
  // Another Agent's workspace made over the RPCs with a workstream that looks like the session's.
  "c-rpc": { workstream: "harness-s" },
};
const store = {
  getSession: async (id: string) => sessions[id] && { session_id: id, ...sessions[id] },
  getWorkspace: async (name: string) => workspaces[name] && { container_name: name, ...workspaces[name] },
} as unknown as Store;
const harness = {
  getHarnessSession: async (namespace: string, name: string) =>
    namespace === "default" && name === "s"
      ? ({
          namespace,
          name,
          uid: "uid-1",
          container_name: "c-harness",
          session_id: "sess-now",
        } as HarnessRecord)
      : undefined,
} as unknown as HarnessStore;

const chat: Principal = {
  id: "t1",
  name: "chat",
  scopes: [parseScope("session:default/s:chat") as NonNullable<ReturnType<typeof parseScope>>],
};

describe("sessionVisibility", () => {
  it("shows a chat token its HarnessSession's own agent sessions, not another Agent's RPC workspace named harness-<name>", async () => {
    const visible = sessionVisibility(store, chat, harness);
    if (!visible) throw new Error("a chat token is filtered");
    const seen: string[] = [];
    for (const id of [...Object.keys(sessions), "no-such-session"]) if (await visible(id)) seen.push(id);
    expect(seen).toEqual(["sess-now", "sess-before-restart"]);
  });
});

describe("sessionLabels", () => {
  it("names the HarnessSession of its agent sessions (across restarts), only the namespace of an RPC workspace named harness-<name>", async () => {
    const label = sessionLabels(store, harness);
    expect(await label("sess-now")).toEqual({ namespace: "default", name: "s", settled: true });
    expect(await label("sess-before-restart")).toEqual({ namespace: "default", name: "s", settled: true });
    expect(await label("sess-rpc")).toEqual({ namespace: "default", settled: true });
    expect(await label("no-such-session")).toBeUndefined();
    expect(await sessionLabels(store)("sess-now")).toEqual({ namespace: "default", settled: true });
  });
});
