import { describe, expect, it } from "vitest";
import { EventBus } from "./event-bus.ts";
import { Lifecycle, type LifecycleOptions } from "./lifecycle.ts";
import { silentLogger } from "../observability/log.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import { SessionJournal } from "./session-journal.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { Workspaces } from "./workspaces.ts";

const noRunners: RunnerDirectory = {
  connectedRunners: () => [],
  isConnected: () => false,
  command: async () => ({ ok: false, error: { code: "UNAVAILABLE", message: "none" } }) as never,
};

describe("Lifecycle options", () => {
  it("require the process's one Workspaces: a Lifecycle never builds a second (its own placement lock would race)", async () => {
    const store = new SqliteStore(":memory:");
    const base = {
      store,
      runners: noRunners,
      journal: new SessionJournal(store, new EventBus()),
      log: silentLogger,
    };
    // @ts-expect-error: without `workspaces` there is no Lifecycle (issue 34 item 9)
    const forgotten: LifecycleOptions = base;
    expect(forgotten.workspaces).toBeUndefined();
    const workspaces = new Workspaces(base);
    expect(new Lifecycle({ ...base, workspaces }).workspaces).toBe(workspaces);
    await store.close();
  });
});
