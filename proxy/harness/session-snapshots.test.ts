/**
 * SessionSnapshots (issue 38) against a real server with an in-process runner over the real
 * WebSocket: `:snapshot`, GET/list/DELETE, fork (spec.source.snapshotRef), `:restore`, and the
 * archive's export and import, with the bad input each must refuse while changing nothing.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { Readable } from "node:stream";
import { extract, pack } from "tar-stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type RunnerCommand,
  UPLOAD_WINDOW_CAPABILITY,
  UPLOAD_WINDOW_PIECES,
} from "../../contracts/runner-protocol.ts";
import { SNAPSHOT_ARCHIVE_FORMAT, snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { type CommandHandler, defaultHandler, type FakeRunner, type Reply } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SNAPSHOTS = `${NS}/sessionsnapshots`;

let t: TestServer;
let runner: FakeRunner;
/** What the runner answers `snapshot_take` (ok with 1234 bytes unless a test says otherwise). */
let takeReply: Reply;
/** The tar the runner streams for `snapshot_read`. */
let volumeTar: Buffer;

function handler(): CommandHandler {
  return (command) => {
    switch (command.kind) {
      case "snapshot_take":
        return takeReply;
      case "snapshot_read":
        for (const [data, done] of [
          [volumeTar.toString("base64"), false],
          ["", true],
        ] as const)
          runner.send({
            version: 1,
            type: "relay_chunk",
            payload: { relay_id: command.relay_id, data, done },
          });
        return { ok: true, result: { size: volumeTar.length } };
      case "snapshot_write":
        return { ok: true, result: { size: 0, ...(command.done ? { size_bytes: 42 } : {}) } };
      case "provision":
        return {
          ok: true,
          result: {
            container_name: command.container_name,
            endpoint: "10.0.0.9:8080",
            ...(command.spec.seedSnapshot ? { seeded_snapshot: command.spec.seedSnapshot.storage } : {}),
          },
        };
      default:
        return defaultHandler(command);
    }
  };
}

async function tarOf(
  entries: {
    name: string;
    type?: "file" | "directory" | "symlink" | "link" | "character-device" | "fifo";
    body?: string;
    linkname?: string;
  }[],
): Promise<Buffer> {
  const p = pack();
  for (const e of entries)
    p.entry(
      { name: e.name, type: e.type ?? "file", ...(e.linkname ? { linkname: e.linkname } : {}) },
      e.type === undefined || e.type === "file" ? (e.body ?? "") : "",
    );
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of p as unknown as AsyncIterable<Uint8Array>) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

const MANIFEST = {
  format: SNAPSHOT_ARCHIVE_FORMAT,
  source: { namespace: "elsewhere", name: "s1", engine: "docker" },
  spec: { sessionRef: "chat", agentRef: "alice", runtimeRef: "reference", resolvedImageDigest: "sha256:abc" },
  sizeBytes: 5,
  createdAt: "2026-12-06T00:00:00.000Z",
};

async function archive(entries: Parameters<typeof tarOf>[0], manifest: unknown = MANIFEST): Promise<Buffer> {
  return gzipSync(await tarOf([{ name: "manifest.json", body: JSON.stringify(manifest) }, ...entries]));
}

async function putArchive(name: string, body: Buffer, query = ""): Promise<{ status: number; body: Json }> {
  const response = await fetch(`${t.server.url}${SNAPSHOTS}/${name}/archive${query}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/gzip" },
    body,
  });
  return { status: response.status, body: await response.json() };
}

const sessionManifest = (name: string, spec: Record<string, unknown> = {}) => ({
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "HarnessSession",
  metadata: { name },
  spec: { agentRef: "alice", runtimeRef: "reference", ...spec },
});

async function readySession(name: string, spec: Record<string, unknown> = {}): Promise<Json> {
  const put = await t.call("PUT", `${SESSIONS}/${name}`, sessionManifest(name, spec));
  expect(put.status, JSON.stringify(put.body)).toBe(201);
  return until(`${name} Ready`, async () => {
    const { body } = await t.call("GET", `${SESSIONS}/${name}`);
    return body.status?.phase === "Ready" ? body : undefined;
  });
}

async function snapshotOf(session: string, name: string): Promise<{ status: number; body: Json }> {
  return t.call("POST", `${SESSIONS}/${session}:snapshot`, { name });
}

beforeEach(async () => {
  takeReply = { ok: true, result: { size_bytes: 1234 } };
  volumeTar = await tarOf([{ name: "volume/notes.txt", body: "hello" }]);
  t = await startTestServer();
  runner = await t.runner({ name: "runner-a", handler: handler() });
  await t.put(`${NS}/agents/bob`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "bob" },
    spec: { runtimeRef: "reference", credentials: [] },
  });
});

afterEach(async () => {
  await t.close();
});

describe(":snapshot", () => {
  it("copies a Ready session's volume on its runner and answers the snapshot Ready, listed and read back", async () => {
    const session = await readySession("chat");
    const { status, body } = await snapshotOf("chat", "before-refactor");
    expect(status, JSON.stringify(body)).toBe(201);
    expect(body.kind).toBe("SessionSnapshot");
    expect(body.spec).toEqual({
      sessionRef: "chat",
      agentRef: "alice",
      runtimeRef: "reference",
      resolvedImageDigest: expect.any(String),
    });
    expect(body.status).toMatchObject({
      phase: "Ready",
      sizeBytes: 1234,
      engine: "docker",
      runner: "runner-a",
      storage: snapshotStorageName("default", "before-refactor"),
      stackName: "default--before-refactor--snapshot",
    });
    const [take] = runner.commandsOf("snapshot_take");
    expect(take).toMatchObject({
      container_name: session.status.containerName ?? expect.any(String),
      target: {
        storage: snapshotStorageName("default", "before-refactor"),
        namespace: "default",
        name: "before-refactor",
      },
      quiesce_ms: 30_000,
    });
    expect((await t.call("GET", `${SNAPSHOTS}/before-refactor`)).body.status.phase).toBe("Ready");
    const list = await t.call("GET", SNAPSHOTS);
    expect(list.body.items.map((s: Json) => s.metadata.name)).toEqual(["before-refactor"]);
  });

  it("refuses a taken name with 409 ALREADY_EXISTS and sends nothing", async () => {
    await readySession("chat");
    expect((await snapshotOf("chat", "s1")).status).toBe(201);
    const again = await snapshotOf("chat", "s1");
    expect(again.status).toBe(409);
    expect(again.body.code).toBe("ALREADY_EXISTS");
    expect(runner.commandsOf("snapshot_take")).toHaveLength(1);
  });

  it("requests in flight that did not end in time: 409 ABORTED saying so, and no snapshot left", async () => {
    await readySession("chat");
    takeReply = {
      ok: false,
      error: { code: "ABORTED", message: "1 request still in flight after 30000 ms" },
    };
    const { status, body } = await snapshotOf("chat", "busy");
    expect(status).toBe(409);
    expect(body.code).toBe("ABORTED");
    expect(body.message).toMatch(/requests in flight did not end within 30 s.*nothing was made/);
    expect((await t.call("GET", `${SNAPSHOTS}/busy`)).status).toBe(404);
  });

  it("a session never provisioned has no volume: 412 FAILED_PRECONDITION", async () => {
    runner.kill();
    await t.call("PUT", `${SESSIONS}/cold`, sessionManifest("cold"));
    const { status, body } = await snapshotOf("cold", "s1");
    expect(status).toBe(412);
    expect(body.message).toMatch(/never provisioned/);
    expect((await t.call("GET", SNAPSHOTS)).body.items).toEqual([]);
  });

  it("a name that is not a DNS label, or an unknown session: 400 / 404, nothing made", async () => {
    await readySession("chat");
    expect((await snapshotOf("chat", "Not_A_Label")).status).toBe(400);
    expect((await snapshotOf("nope", "s1")).status).toBe(404);
    expect(runner.commandsOf("snapshot_take")).toHaveLength(0);
  });
});

describe("DELETE …/sessionsnapshots/{name}", () => {
  it("frees the storage on its runner, then forgets it; deleting the session keeps its snapshots", async () => {
    await readySession("chat");
    await snapshotOf("chat", "keep");
    await snapshotOf("chat", "drop");
    expect((await t.call("DELETE", `${SESSIONS}/chat`)).status).toBe(200);
    expect((await t.call("GET", `${SNAPSHOTS}/keep`)).status).toBe(200);
    const deleted = await t.call("DELETE", `${SNAPSHOTS}/drop`);
    expect(deleted.status).toBe(200);
    expect(runner.commandsOf("snapshot_delete")).toEqual([
      expect.objectContaining({
        target: expect.objectContaining({ storage: snapshotStorageName("default", "drop") }),
      }),
    ]);
    expect((await t.call("GET", `${SNAPSHOTS}/drop`)).status).toBe(404);
    expect((await t.call("DELETE", `${SNAPSHOTS}/drop`)).status).toBe(404);
  });

  it("its runner not connected: 503 naming it, and the snapshot is kept", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    runner.kill();
    await until("runner gone", async () =>
      (await t.call("GET", "/v1/runners")).body.items?.every((r: Json) => !r.connected) ? true : undefined,
    ).catch(() => undefined);
    const { status, body } = await t.call("DELETE", `${SNAPSHOTS}/s1`);
    expect(status).toBe(503);
    expect(body.message).toMatch(/runner runner-a.*not connected.*kept/);
    expect((await t.call("GET", `${SNAPSHOTS}/s1`)).status).toBe(200);
  });
});

describe("a snapshot left Pending by a server that stopped", () => {
  it("is deleted like a Ready one (the runner's delete is idempotent)", async () => {
    const dataDir = t.dataDir;
    await t.stop();
    const store = new SqliteStore(join(dataDir, "agent-sessions.db"));
    await store.putResource({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "SessionSnapshot",
      metadata: {
        name: "stale",
        namespace: "default",
        uid: "u",
        creationTimestamp: new Date().toISOString(),
      },
      spec: {
        sessionRef: "chat",
        agentRef: "alice",
        runtimeRef: "reference",
        resolvedImageDigest: "sha256:a",
      },
      status: { phase: "Pending", message: "being taken", runner: "runner-a", storage: "ss-default--stale" },
    });
    await store.close();
    t = await startTestServer({ dataDir }, { agent: false });
    runner = await t.runner({ name: "runner-a", handler: handler() });
    const { status, body } = await t.call("DELETE", `${SNAPSHOTS}/stale`);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(runner.commandsOf("snapshot_delete")).toHaveLength(1);
    expect((await t.call("GET", `${SNAPSHOTS}/stale`)).status).toBe(404);
  });
});

describe("fork: spec.source.snapshotRef", () => {
  it("is seeded from the snapshot on its runner once, and its agent's first start resumes", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    const forked = await readySession("fork", { source: { snapshotRef: "s1" } });
    const provisions = runner
      .commandsOf("provision")
      .filter((p) => p.container_name === forked.status.containerName || p.spec.seedSnapshot);
    expect(provisions.at(-1)?.spec.seedSnapshot).toMatchObject({
      storage: snapshotStorageName("default", "s1"),
      namespace: "default",
      name: "s1",
    });
    const starts = runner.commandsOf("start");
    expect(starts.at(-1)?.resume).toBe(true);
    // Stopped and brought back: the seed is not sent again (the provision said seeded_snapshot).
    await t.call("PATCH", `${SESSIONS}/fork`, { spec: { desiredState: "stopped" } });
    await until("fork stopped", async () =>
      (await t.call("GET", `${SESSIONS}/fork`)).body.status.phase === "Stopped" ? true : undefined,
    );
    const before = runner.commandsOf("provision").length;
    await t.call("PATCH", `${SESSIONS}/fork`, { spec: { desiredState: "running" } });
    await until("fork back", async () => (runner.commandsOf("provision").length > before ? true : undefined));
    expect(runner.commandsOf("provision").at(-1)?.spec.seedSnapshot).toBeUndefined();
  });

  it("an unknown snapshot, another Agent's, or another namespace's: 400 naming spec.source.snapshotRef, nothing stored", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    const unknown = await t.call(
      "PUT",
      `${SESSIONS}/f1`,
      sessionManifest("f1", { source: { snapshotRef: "nope" } }),
    );
    expect(unknown.status).toBe(400);
    expect(unknown.body.message).toMatch(
      /spec\.source\.snapshotRef: SessionSnapshot default\/nope not found/,
    );
    const other = await t.call(
      "PUT",
      `${SESSIONS}/f2`,
      sessionManifest("f2", { agentRef: "bob", source: { snapshotRef: "s1" } }),
    );
    expect(other.status).toBe(400);
    expect(other.body.message).toMatch(/taken of Agent alice, not bob/);
    const elsewhere = await t.call("PUT", "/v1/namespaces/team-b/harnesssessions/f3", {
      ...sessionManifest("f3", { source: { snapshotRef: "s1" } }),
      metadata: { name: "f3", namespace: "team-b" },
    });
    expect(elsewhere.status).toBe(400);
    expect(elsewhere.body.message).toMatch(/team-b\/s1 not found/);
    for (const [ns, name] of [
      ["default", "f1"],
      ["default", "f2"],
      ["team-b", "f3"],
    ])
      expect((await t.call("GET", `/v1/namespaces/${ns}/harnesssessions/${name}`)).status).toBe(404);
  });

  it("spec.source cannot be added or changed later", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    const patched = await t.call("PATCH", `${SESSIONS}/chat`, { spec: { source: { snapshotRef: "s1" } } });
    expect(patched.status).toBe(400);
    expect(patched.body.message).toMatch(/spec\.source is immutable/);
  });
});

describe(":restore", () => {
  it("stops the session, restores its volume on its runner, and brings it back resuming", async () => {
    const session = await readySession("chat");
    await snapshotOf("chat", "s1");
    const startsBefore = runner.commandsOf("start").length;
    const { status, body } = await t.call("POST", `${SESSIONS}/chat:restore`, { snapshot: "s1" });
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.snapshot).toBe("s1");
    expect(body.session.status.phase).toBe("Ready");
    const kinds = runner.commands.map((c) => c.kind);
    const restoreAt = kinds.lastIndexOf("snapshot_restore");
    expect(kinds.lastIndexOf("scale_down")).toBeLessThan(restoreAt);
    // The runner was asked to ready the restore (its copy pod) before the stop, for that snapshot.
    expect(kinds.lastIndexOf("snapshot_restore_prepare")).toBeLessThan(kinds.lastIndexOf("scale_down"));
    const [prepare] = runner.commandsOf("snapshot_restore_prepare");
    expect(prepare?.source.storage).toBe(snapshotStorageName("default", "s1"));
    expect(kinds.lastIndexOf("start")).toBeGreaterThan(restoreAt);
    const [restore] = runner.commandsOf("snapshot_restore");
    expect(restore?.container_name).toBe(session.status.containerName ?? restore?.container_name);
    expect(restore?.source.storage).toBe(snapshotStorageName("default", "s1"));
    const start = runner.commandsOf("start").at(-1) as Extract<RunnerCommand, { kind: "start" }>;
    expect(runner.commandsOf("start").length).toBe(startsBefore + 1);
    expect(start.resume).toBe(true);
  });

  it("a snapshot of another Agent, or unknown: 400 naming the mismatch, and the session is left running", async () => {
    await readySession("chat");
    await readySession("other", { agentRef: "bob" });
    await snapshotOf("other", "bobs");
    const mismatch = await t.call("POST", `${SESSIONS}/chat:restore`, { snapshot: "bobs" });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.message).toMatch(/taken of Agent bob, not alice/);
    const unknown = await t.call("POST", `${SESSIONS}/chat:restore`, { snapshot: "nope" });
    expect(unknown.status).toBe(400);
    expect(runner.commandsOf("snapshot_restore")).toHaveLength(0);
    expect(runner.commandsOf("snapshot_restore_prepare")).toHaveLength(0);
    expect(runner.commandsOf("scale_down")).toHaveLength(0);
    expect((await t.call("GET", `${SESSIONS}/chat`)).body.status.phase).toBe("Ready");
  });
});

describe("the archive", () => {
  it("exports manifest.json first, then the runner's volume/ entries, gzip-compressed", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    const response = await fetch(`${t.server.url}${SNAPSHOTS}/s1/archive`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(response.status).toBe(200);
    const tar = gunzipSync(Buffer.from(await response.arrayBuffer()));
    const names: string[] = [];
    let manifest: Json;
    const reader = extract();
    Readable.from([tar]).pipe(reader as unknown as NodeJS.WritableStream);
    for await (const entry of reader) {
      names.push(entry.header.name);
      const chunks: Buffer[] = [];
      for await (const chunk of entry) chunks.push(Buffer.from(chunk as Uint8Array));
      if (entry.header.name === "manifest.json") manifest = JSON.parse(Buffer.concat(chunks).toString());
    }
    expect(names).toEqual(["manifest.json", "volume/notes.txt"]);
    expect(manifest).toMatchObject({
      format: SNAPSHOT_ARCHIVE_FORMAT,
      source: { namespace: "default", name: "s1", engine: "docker" },
      spec: { sessionRef: "chat", agentRef: "alice" },
      sizeBytes: 1234,
    });
  });

  it("imports a valid archive onto a runner of the engine asked for: Ready with the runner's size, its spec the manifest's", async () => {
    const k8s = await t.runner({ name: "runner-k", engine: "kubernetes", handler: handler() });
    const body = await archive([
      { name: "volume/", type: "directory" },
      { name: "volume/a.txt", body: "hello" },
      { name: "volume/link", type: "symlink", linkname: "a.txt" },
    ]);
    const { status, body: snapshot } = await putArchive("imported", body, "?engine=kubernetes");
    expect(status, JSON.stringify(snapshot)).toBe(201);
    expect(snapshot.spec).toEqual(MANIFEST.spec);
    expect(snapshot.status).toMatchObject({
      phase: "Ready",
      sizeBytes: 42,
      engine: "kubernetes",
      runner: "runner-k",
    });
    const writes = k8s.commandsOf("snapshot_write");
    expect(writes.at(-1)?.done).toBe(true);
    const staged = Buffer.concat(writes.map((w) => Buffer.from(w.data, "base64")));
    const names: string[] = [];
    const reader = extract();
    Readable.from([staged]).pipe(reader as unknown as NodeJS.WritableStream);
    for await (const entry of reader) {
      names.push(entry.header.name);
      entry.resume();
    }
    expect(names).toEqual(["volume/", "volume/a.txt", "volume/link"]);
    expect(runner.commandsOf("snapshot_write")).toHaveLength(0);
  });

  /** A file of `mib` MiB that gzip hardly shrinks (hex of random bytes), to span several pieces. */
  const large = (mib: number) => randomBytes((mib * 1024 * 1024) / 2).toString("hex");
  /** What the runner got of `writes`, joined (the fake runner takes them as base64). */
  const joined = (writes: { data: string }[]) =>
    Buffer.concat(writes.map((w) => Buffer.from(w.data, "base64")));
  /** A Kubernetes runner that takes an upload window; `onWrite` answers its `snapshot_write`s. */
  const windowedRunner = (
    onWrite: (command: Extract<RunnerCommand, { kind: "snapshot_write" }>) => Promise<Reply>,
  ) =>
    t.runner({
      name: "runner-w",
      engine: "kubernetes",
      capabilities: [UPLOAD_WINDOW_CAPABILITY],
      handler: async (command) => (command.kind === "snapshot_write" ? onWrite(command) : handler()(command)),
    });

  it("sends a large archive's pieces while it is read, the last one (which makes the storage) once all of it passed", async () => {
    const content = large(3);
    const { status, body } = await putArchive(
      "large",
      await archive([{ name: "volume/big.txt", body: content }]),
    );
    expect(status, JSON.stringify(body)).toBe(201);
    const writes = runner.commandsOf("snapshot_write");
    expect(writes.length).toBeGreaterThan(3);
    expect(writes.map((w) => w.seq)).toEqual([...writes.keys()]);
    expect(writes.map((w) => w.done)).toEqual([...writes.slice(1).map(() => false), true]);
    const reader = extract();
    Readable.from([joined(writes)]).pipe(reader as unknown as NodeJS.WritableStream);
    const files: Record<string, string> = {};
    for await (const entry of reader) {
      const chunks: Buffer[] = [];
      for await (const chunk of entry) chunks.push(Buffer.from(chunk as Uint8Array));
      files[entry.header.name] = Buffer.concat(chunks).toString();
    }
    expect(Object.keys(files)).toEqual(["volume/big.txt"]);
    expect(files["volume/big.txt"] === content).toBe(true);
  });

  it("to a runner that takes an upload window: several pieces in flight, in order, the last only once every other was answered", async () => {
    let inFlight = 0;
    let most = 0;
    let lastSawInFlight = 0;
    // The first window's pieces are answered only once all of them came: the server sends a
    // window's worth unanswered, and never more (the answers after it come at once).
    let windowFull: () => void = () => {};
    const firstWindow = new Promise<void>((resolve) => {
      windowFull = resolve;
    });
    const windowed = await windowedRunner(async (command) => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      if (command.done) lastSawInFlight = inFlight;
      if (command.seq === UPLOAD_WINDOW_PIECES - 1) windowFull();
      if (command.seq < UPLOAD_WINDOW_PIECES) await firstWindow;
      inFlight -= 1;
      return { ok: true, result: { size: 0, ...(command.done ? { size_bytes: 42 } : {}) } };
    });
    const content = large(12);
    const { status, body } = await putArchive(
      "windowed",
      await archive([{ name: "volume/big.txt", body: content }]),
      "?engine=kubernetes",
    );
    expect(status, JSON.stringify(body)).toBe(201);
    const writes = windowed.commandsOf("snapshot_write");
    expect(writes.length).toBeGreaterThan(UPLOAD_WINDOW_PIECES);
    expect(writes.map((w) => w.seq)).toEqual([...writes.keys()]);
    expect(writes.map((w) => w.done)).toEqual([...writes.slice(1).map(() => false), true]);
    expect(most).toBe(UPLOAD_WINDOW_PIECES);
    expect(lastSawInFlight).toBe(1); // only itself
    expect(joined(writes).includes(Buffer.from(content.slice(0, 1000)))).toBe(true);
  });

  it("to a runner that takes an upload window, a piece refused on the way: the import fails saying so, the rest dropped (abort), nothing made", async () => {
    const windowed = await windowedRunner(async (command) => {
      if (command.seq === 3 && !command.abort)
        return { ok: false, error: { code: "INTERNAL", message: "the staging disk is full" } };
      return { ok: true, result: { size: 0 } };
    });
    const { status, body } = await putArchive(
      "refused",
      await archive([{ name: "volume/big.txt", body: large(12) }]),
      "?engine=kubernetes",
    );
    expect(status, JSON.stringify(body)).toBe(500);
    expect(body.message).toMatch(/the staging disk is full; nothing was kept/);
    const writes = windowed.commandsOf("snapshot_write");
    expect(writes.some((w) => w.done)).toBe(false);
    expect(writes.at(-1)).toMatchObject({ abort: true });
    expect((await t.call("GET", `${SNAPSHOTS}/refused`)).status).toBe(404);
  });

  it("a large archive refused near its end: 400, what the runner got of it dropped (abort), nothing made", async () => {
    const bad = await archive([
      { name: "volume/big.txt", body: large(3) },
      { name: "volume/../../etc/passwd", body: "x" },
    ]);
    const { status, body } = await putArchive("bad", bad);
    expect(status, JSON.stringify(body)).toBe(400);
    expect(body.message).toMatch(/climbs out/);
    const writes = runner.commandsOf("snapshot_write");
    expect(writes.length).toBeGreaterThan(1);
    expect(writes.some((w) => w.done)).toBe(false);
    expect(writes.at(-1)).toMatchObject({ abort: true });
    expect((await t.call("GET", `${SNAPSHOTS}/bad`)).status).toBe(404);
  });

  const refused: [string, () => Promise<Buffer>, RegExp][] = [
    [
      "an entry climbing out with ../",
      () => archive([{ name: "volume/../../etc/passwd", body: "x" }]),
      /climbs out/,
    ],
    ["an absolute path", () => archive([{ name: "/etc/passwd", body: "x" }]), /absolute path/],
    ["an entry outside volume/", () => archive([{ name: "other/a.txt", body: "x" }]), /outside volume\//],
    [
      "a symlink leading out",
      () => archive([{ name: "volume/l", type: "symlink", linkname: "../../etc" }]),
      /points out/,
    ],
    [
      "an absolute symlink",
      () => archive([{ name: "volume/l", type: "symlink", linkname: "/etc/passwd" }]),
      /must be relative/,
    ],
    ["a hard link", () => archive([{ name: "volume/h", type: "link", linkname: "volume/a" }]), /is a link/],
    ["a device", () => archive([{ name: "volume/d", type: "character-device" }]), /is a character-device/],
    ["a FIFO", () => archive([{ name: "volume/f", type: "fifo" }]), /is a fifo/],
    [
      "no manifest first",
      async () => gzipSync(await tarOf([{ name: "volume/a", body: "x" }])),
      /first entry must be the file manifest\.json/,
    ],
    ["an invalid manifest", () => archive([], { format: "nope" }), /not a snapshot manifest/],
    [
      "a truncated archive",
      async () => (await archive([{ name: "volume/a", body: "x".repeat(5000) }])).subarray(0, 60),
      /truncated|not a whole/,
    ],
    [
      "a tar cut short inside a whole gzip",
      async () => {
        const tar = await tarOf([
          { name: "manifest.json", body: JSON.stringify(MANIFEST) },
          { name: "volume/a", body: "x".repeat(5000) },
        ]);
        return gzipSync(tar.subarray(0, 2048));
      },
      /truncated/,
    ],
    ["volume/ itself as a file", () => archive([{ name: "volume", body: "x" }]), /can only be a directory/],
    ["something not gzip", async () => Buffer.from("plain text"), /not a whole gzip/],
  ];
  for (const [what, make, message] of refused)
    it(`refuses ${what} with 400, making nothing`, async () => {
      const { status, body } = await putArchive("bad", await make());
      expect(status, JSON.stringify(body)).toBe(400);
      expect(body.code).toBe("INVALID_ARGUMENT");
      expect(body.message).toMatch(message);
      expect(runner.commandsOf("snapshot_write")).toHaveLength(0);
      expect((await t.call("GET", `${SNAPSHOTS}/bad`)).status).toBe(404);
    });

  it("refuses a name that is not a DNS label (400) and a name taken (409)", async () => {
    expect((await putArchive("Bad_Name", await archive([]))).status).toBe(400);
    expect((await putArchive("ok", await archive([]))).status).toBe(201);
    const taken = await putArchive("ok", await archive([]));
    expect(taken.status).toBe(409);
    expect(taken.body.code).toBe("ALREADY_EXISTS");
  });
});

describe("an oversized archive", () => {
  let small: TestServer;
  beforeEach(async () => {
    small = await startTestServer({ snapshotArchiveMaxBytes: 2048 });
    await small.runner({ name: "runner-a", handler: handler() });
  });
  afterEach(async () => small.close());

  it("is 413 RESOURCE_EXHAUSTED naming the setting, nothing made", async () => {
    const big = gzipSync(
      await tarOf([
        { name: "manifest.json", body: JSON.stringify(MANIFEST) },
        { name: "volume/big", body: "x".repeat(64 * 1024) },
      ]),
    );
    const response = await fetch(`${small.server.url}${SNAPSHOTS}/big/archive`, {
      method: "PUT",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      body: big,
    });
    const body = (await response.json()) as Json;
    expect(response.status, JSON.stringify(body)).toBe(413);
    expect(body.message).toMatch(/AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES/);
    expect((await small.call("GET", `${SNAPSHOTS}/big`)).status).toBe(404);
  });
});

describe("placement and state", () => {
  it("snapshots a stopped session too (the runner copies the volume with the workload at 0)", async () => {
    await readySession("chat");
    await t.call("PATCH", `${SESSIONS}/chat`, { spec: { desiredState: "stopped" } });
    await until("stopped", async () =>
      (await t.call("GET", `${SESSIONS}/chat`)).body.status.phase === "Stopped" ? true : undefined,
    );
    const { status } = await snapshotOf("chat", "cold-copy");
    expect(status).toBe(201);
    expect(runner.commandsOf("snapshot_take")).toHaveLength(1);
    expect((await t.call("GET", `${SESSIONS}/chat`)).body.status.phase).toBe("Stopped");
  });

  it("a fork goes on the runner holding its snapshot, whatever the other runners' load", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    const other = await t.runner({ name: "runner-b", capacity: 100, handler: handler() });
    for (let i = 0; i < 3; i++) await readySession(`fill-${i}`, { runnerSelector: {} });
    const provisionedOnA = runner.commandsOf("provision").length;
    await readySession("fork", { source: { snapshotRef: "s1" } });
    expect(runner.commandsOf("provision").length).toBe(provisionedOnA + 1);
    expect(other.commandsOf("provision").every((p) => p.spec.seedSnapshot === undefined)).toBe(true);
  });

  it("a restore with a snapshot held by another runner than the session's: 400 naming both, nothing changed", async () => {
    await readySession("chat");
    await t.runner({ name: "runner-b", engine: "kubernetes", handler: handler() });
    const imported = await putArchive(
      "on-b",
      await archive([{ name: "volume/a", body: "x" }]),
      "?engine=kubernetes",
    );
    expect(imported.body.status.runner).toBe("runner-b");
    const { status, body } = await t.call("POST", `${SESSIONS}/chat:restore`, { snapshot: "on-b" });
    expect(status).toBe(400);
    expect(body.message).toMatch(/held by runner runner-b.*on runner runner-a.*fork the snapshot instead/);
    expect(runner.commandsOf("scale_down")).toHaveLength(0);
    expect((await t.call("GET", `${SESSIONS}/chat`)).body.status.phase).toBe("Ready");
  });

  it("a restore of a session whose desiredState is stopped leaves it Stopped", async () => {
    await readySession("chat");
    await snapshotOf("chat", "s1");
    await t.call("PATCH", `${SESSIONS}/chat`, { spec: { desiredState: "stopped" } });
    await until("stopped", async () =>
      (await t.call("GET", `${SESSIONS}/chat`)).body.status.phase === "Stopped" ? true : undefined,
    );
    const starts = runner.commandsOf("start").length;
    const { status, body } = await t.call("POST", `${SESSIONS}/chat:restore`, { snapshot: "s1" });
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.session.status.phase).toBe("Stopped");
    expect(runner.commandsOf("snapshot_restore")).toHaveLength(1);
    expect(runner.commandsOf("start")).toHaveLength(starts);
  });
});

describe("namespace quotas", () => {
  let q: TestServer;
  let r: FakeRunner;
  beforeEach(async () => {
    q = await startTestServer({
      namespaceQuotas: { snapshots: { every: 1 }, snapshotBytes: { every: 1000 } },
    });
    r = await q.runner({ name: "runner-a", handler: handler() });
  });
  afterEach(async () => q.close());

  it("refuses a snapshot past the namespace's count (429 naming the setting), nothing sent", async () => {
    takeReply = { ok: true, result: { size_bytes: 10 } };
    const prev = t;
    t = q;
    try {
      await readySession("chat");
      expect((await snapshotOf("chat", "one")).status).toBe(201);
      const { status, body } = await snapshotOf("chat", "two");
      expect(status).toBe(429);
      expect(body.message).toMatch(/AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOTS/);
      expect(r.commandsOf("snapshot_take")).toHaveLength(1);
    } finally {
      t = prev;
    }
  });

  it("refuses an import whose files would pass the namespace's snapshot bytes", async () => {
    const prev = t;
    t = q;
    try {
      const big = await archive([{ name: "volume/big", body: "x".repeat(4096) }]);
      const { status, body } = await putArchive("big", big);
      expect(status, JSON.stringify(body)).toBe(429);
      expect(body.message).toMatch(/AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOT_BYTES/);
      expect(r.commandsOf("snapshot_write")).toHaveLength(0);
    } finally {
      t = prev;
    }
  });
});
