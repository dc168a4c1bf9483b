import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CodedError } from "../../contracts/errors.ts";
import type { WorkspaceFiles } from "../engine/driver.ts";
import { WorkspaceCommands } from "./workspace-commands.ts";

/** An engine whose diff and listing hang until their signal aborts; `stopped` says which stopped. */
function hangingEngine(stopped: string[]): WorkspaceFiles {
  const until = (what: string, signal?: AbortSignal) =>
    new Promise<never>((_, reject) =>
      signal?.addEventListener("abort", () => {
        stopped.push(what);
        reject(signal.reason);
      }),
    );
  return {
    list: (_c, _p, signal) => until("list", signal),
    read: async () => (async function* () {})(),
    write: async () => {},
    delete: async () => true,
    diff: async (_c, _p, signal) => ({
      async *[Symbol.asyncIterator]() {
        yield Buffer.from("diff --git a/x b/x\n");
        await until("diff", signal);
      },
    }),
  };
}

const deadline = () => new CodedError("DEADLINE_EXCEEDED", "past its deadline");

describe("workspace commands past their deadline", () => {
  it("stop the engine's diff (its container goes) instead of leaving it running", async () => {
    const stopped: string[] = [];
    const commands = new WorkspaceCommands(hangingEngine(stopped), mkdtempSync(join(tmpdir(), "wc-")));
    const controller = new AbortController();
    const reading = commands.read(
      { kind: "workspace_read", container_name: "c", path: "", what: "diff", relay_id: "r", max_bytes: 1e6 },
      { chunk: () => {}, buffered: () => 0 },
      controller.signal,
    );
    setTimeout(() => controller.abort(deadline()), 20);
    await expect(reading).rejects.toMatchObject({ code: "DEADLINE_EXCEEDED" });
    expect(stopped).toEqual(["diff"]);
  });

  it("stop the engine's listing", async () => {
    const stopped: string[] = [];
    const commands = new WorkspaceCommands(hangingEngine(stopped), mkdtempSync(join(tmpdir(), "wc-")));
    const controller = new AbortController();
    const listing = commands.list(
      { kind: "workspace_list", container_name: "c", path: "" },
      controller.signal,
    );
    setTimeout(() => controller.abort(deadline()), 20);
    await expect(listing).rejects.toMatchObject({ code: "DEADLINE_EXCEEDED" });
    expect(stopped).toEqual(["list"]);
  });
});
