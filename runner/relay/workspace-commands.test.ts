import { existsSync, mkdtempSync, readdirSync } from "node:fs";
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
    diff: async (_c, _p, _commit, signal) => ({
      async *[Symbol.asyncIterator]() {
        yield Buffer.from("diff --git a/x b/x\n");
        await until("diff", signal);
      },
    }),
  };
}

const SEEDED = "a".repeat(40);

describe("a workspace diff's baseline (issue 34 item 12)", () => {
  /** An engine that records the commit each diff was asked against. */
  function recordingEngine(asked: string[]): WorkspaceFiles {
    return {
      ...hangingEngine([]),
      diff: async (_c, _p, commit) => {
        asked.push(commit);
        return (async function* () {})();
      },
    };
  }
  const diffOf = (seeded?: string) => ({
    kind: "workspace_read" as const,
    container_name: "c",
    path: "repo",
    what: "diff" as const,
    relay_id: "r",
    max_bytes: 1e6,
    ...(seeded ? { seeded_commit: seeded } : {}),
  });
  const sink = { chunk: () => {}, buffered: () => 0 };

  it("is the commit the server sent", async () => {
    const asked: string[] = [];
    const commands = new WorkspaceCommands(recordingEngine(asked), mkdtempSync(join(tmpdir(), "wc-")));
    await commands.read(diffOf(SEEDED), sink);
    expect(asked).toEqual([SEEDED]);
  });

  it("is never looked for in the workspace: without one the diff is FAILED_PRECONDITION and the engine is not asked", async () => {
    const asked: string[] = [];
    const commands = new WorkspaceCommands(recordingEngine(asked), mkdtempSync(join(tmpdir(), "wc-")));
    await expect(commands.read(diffOf(), sink)).rejects.toMatchObject({
      code: "FAILED_PRECONDITION",
      message: expect.stringMatching(/no seeded commit/),
    });
    expect(asked).toEqual([]);
  });
});

const deadline = () => new CodedError("DEADLINE_EXCEEDED", "past its deadline");

describe("workspace commands past their deadline", () => {
  it("stop the engine's diff (its container goes) instead of leaving it running", async () => {
    const stopped: string[] = [];
    const commands = new WorkspaceCommands(hangingEngine(stopped), mkdtempSync(join(tmpdir(), "wc-")));
    const controller = new AbortController();
    const reading = commands.read(
      {
        kind: "workspace_read",
        container_name: "c",
        path: "",
        what: "diff",
        relay_id: "r",
        max_bytes: 1e6,
        seeded_commit: SEEDED,
      },
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

/** Piece `seq` of upload `id` into workspace `container`: 1 KiB, not the last. */
const piece = (id: string, container: string, seq = 0, done = false) => ({
  kind: "workspace_write" as const,
  container_name: container,
  path: "f.bin",
  upload_id: id,
  seq,
  data: Buffer.alloc(1024).toString("base64"),
  done,
});

const staged = (dir: string) => (existsSync(dir) ? readdirSync(dir).sort() : []);

describe("staged uploads (issue 34 item 17)", () => {
  it("are bounded per workspace and per runner: one more is RESOURCE_EXHAUSTED naming the setting, and stages nothing", async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "wc-")), "uploads");
    const commands = new WorkspaceCommands(hangingEngine([]), dir, {
      uploadsMax: 2,
      uploadsPerWorkspaceMax: 1,
      uploadIdleMs: 60_000,
    });
    await commands.write(piece("upload-a1", "a"));
    await expect(commands.write(piece("upload-a2", "a"))).rejects.toMatchObject({
      code: "RESOURCE_EXHAUSTED",
      message: expect.stringMatching(
        /workspace a.*1 upload.*AGENT_SESSIONS_RUNNER_UPLOADS_PER_WORKSPACE_MAX/,
      ),
    });
    await commands.write(piece("upload-b1", "b"));
    await expect(commands.write(piece("upload-c1", "c"))).rejects.toMatchObject({
      code: "RESOURCE_EXHAUSTED",
      message: expect.stringMatching(/2 uploads.*AGENT_SESSIONS_RUNNER_UPLOADS_MAX/),
    });
    expect(staged(dir)).toEqual(["upload-a1", "upload-b1"]);
    // A piece of an upload already staged is not a new one; its last piece frees the place.
    await commands.write(piece("upload-a1", "a", 1, true));
    await commands.write(piece("upload-a2", "a"));
    expect(staged(dir)).toEqual(["upload-a2", "upload-b1"]);
    commands.close();
  });

  it("time out when no piece comes: the staging file goes, the place is free, a late piece is refused", async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "wc-")), "uploads");
    const commands = new WorkspaceCommands(hangingEngine([]), dir, {
      uploadsMax: 1,
      uploadsPerWorkspaceMax: 1,
      uploadIdleMs: 50,
    });
    await commands.write(piece("upload-stalled", "a"));
    expect(staged(dir)).toEqual(["upload-stalled"]);
    await new Promise((r) => setTimeout(r, 150));
    expect(staged(dir)).toEqual([]);
    await expect(commands.write(piece("upload-stalled", "a", 1))).rejects.toMatchObject({
      code: "FAILED_PRECONDITION",
    });
    await commands.write(piece("upload-next", "b")); // the one place is free again
    commands.close();
  });
});
