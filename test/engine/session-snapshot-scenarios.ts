/**
 * Snapshots, fork and restore of HarnessSessions (issue 38) on one engine, real parts only: a
 * server and a runner over the real WebSocket, real Pulumi stacks, the engine, the loopback model,
 * and real harnesses (the reference runtime and compass). What a user checks:
 * - a fork recalls the conversation the snapshot holds and has its files; the fork and the
 *   original diverge from then on (a file written in one is absent in the other);
 * - restore drops what came after the snapshot (files and conversation);
 * - a snapshot taken with a request in flight waits for it, then succeeds;
 * - an exported archive imported under another name forks like the original snapshot;
 * - deleting the session keeps its snapshots; deleting a snapshot frees its storage on the engine;
 * - bad input (unknown or mismatched snapshot, a name that is not a DNS label, an archive entry
 *   escaping the root, a chat token) is refused with a clear 4xx and changes nothing.
 */
import { randomBytes } from "node:crypto";
import { gzipSync } from "node:zlib";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { kubeClients } from "../support/kube-harness.ts";
import { dockerClient } from "../support/session-harness.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

export type SnapshotScenarioOptions = {
  engine: "docker" | "kubernetes";
  /** Appended to every session and snapshot name: the cluster is shared by test files. */
  suffix?: string;
};

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SNAPSHOTS = `${NS}/sessionsnapshots`;
const RECALL = "what token did I give you?";
const READY_MS = 300_000;

/** Whether a snapshot's storage is on the engine: a Docker volume, a PVC of the sessions namespace. */
export async function storageExists(engine: "docker" | "kubernetes", storage: string): Promise<boolean> {
  if (engine === "docker")
    return dockerClient()
      .getVolume(storage)
      .inspect()
      .then(
        () => true,
        (e: { statusCode?: number }) => {
          if (e.statusCode === 404) return false;
          throw e;
        },
      );
  const kube = await kubeClients();
  return kube.core.readNamespacedPersistentVolumeClaim({ name: storage, namespace: "agent-sessions" }).then(
    () => true,
    (e: { code?: number }) => {
      if (e.code === 404) return false;
      throw e;
    },
  );
}

/** One ustar header block (512 bytes) for a hand-made archive entry. */
export function tarHeader(name: string, type: "0" | "1" | "2" | "3" | "5", size: number, link = ""): Buffer {
  const h = Buffer.alloc(512, 0);
  h.write(name, 0, 100, "utf8");
  h.write("0000644\0", 100, 8, "ascii");
  h.write("0000000\0", 108, 8, "ascii");
  h.write("0000000\0", 116, 8, "ascii");
  h.write(`${size.toString(8).padStart(11, "0")}\0`, 124, 12, "ascii");
  h.write(
    `${Math.floor(Date.now() / 1000)
      .toString(8)
      .padStart(11, "0")}\0`,
    136,
    12,
    "ascii",
  );
  h.write("        ", 148, 8, "ascii");
  h.write(type, 156, 1, "ascii");
  h.write(link, 157, 100, "utf8");
  h.write("ustar\0", 257, 6, "ascii");
  h.write("00", 263, 2, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "ascii");
  return h;
}

/** A gzip tar of `entries` (file bodies padded to blocks), ended as tar ends. */
export function tarGz(
  entries: { name: string; type?: "0" | "1" | "2" | "3" | "5"; body?: string; link?: string }[],
) {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = Buffer.from(e.body ?? "");
    blocks.push(tarHeader(e.name, e.type ?? "0", e.type && e.type !== "0" ? 0 : body.length, e.link));
    if ((!e.type || e.type === "0") && body.length) {
      blocks.push(body, Buffer.alloc((512 - (body.length % 512)) % 512));
    }
  }
  blocks.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(blocks));
}

export function sessionSnapshotScenarios(options: SnapshotScenarioOptions): void {
  const n = (name: string) => `${name}${options.suffix ?? ""}`;
  const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
  const LATER = `later-${randomBytes(4).toString("hex")}`;
  let system: System;
  let model: ModelServer;

  const call = (method: string, path: string, body?: unknown, token?: string) =>
    system.call(method, path, body, token);
  const ask = (name: string, input: string, id?: string) =>
    call("POST", `${SESSIONS}/${name}/requests`, { input, ...(id ? { id } : {}) });

  async function raw(method: string, path: string, body?: string | Uint8Array) {
    const res = await fetch(`${system.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${system.adminToken}` },
      ...(body !== undefined ? { body } : {}),
    });
    return {
      status: res.status,
      bytes: Buffer.from(await res.arrayBuffer()),
      type: res.headers.get("content-type"),
    };
  }
  const readFile = async (session: string, path: string) => {
    const r = await raw("GET", `${SESSIONS}/${session}/workspace/files/${path}`);
    return r.status === 200 ? r.bytes.toString("utf8") : r.status;
  };
  const writeFile = async (session: string, path: string, text: string) => {
    const r = await raw("PUT", `${SESSIONS}/${session}/workspace/files/${path}`, text);
    expect(r.status, r.bytes.toString()).toBe(201);
  };

  function manifest(name: string, agentRef: string, runtimeRef: string, extra: Record<string, unknown> = {}) {
    return {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef, runtimeRef, desiredState: "running", idleTimeout: "30m", ...extra },
    };
  }

  async function phase(name: string, wanted: string, timeoutMs = READY_MS): Promise<Json> {
    return until(
      `${name} ${wanted}`,
      async () => {
        const s = await call("GET", `${SESSIONS}/${name}`);
        if (s.body.status?.phase === wanted) return s.body;
        throw new Error(`phase ${s.body.status?.phase}: ${JSON.stringify(s.body.status?.conditions ?? [])}`);
      },
      timeoutMs,
    );
  }

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    for (const [agent, runtimeRef] of [
      ["assistant", "reference"],
      ["compass-assistant", "compass"],
    ] as const) {
      const put = await call("PUT", `${NS}/agents/${agent}`, modelAgent(agent, model, { runtimeRef }));
      expect(put.status, JSON.stringify(put.body)).toBe(201);
    }
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    const sessions = [
      "orig-reference",
      "fork-reference",
      "orig-compass",
      "fork-compass",
      "busy",
      "from-import",
    ];
    await Promise.all(
      sessions.map((s) => system?.call("DELETE", `${SESSIONS}/${n(s)}`).catch(() => undefined)),
    );
    const left = await system?.call("GET", SNAPSHOTS).catch(() => undefined);
    for (const s of (left?.body?.items ?? []) as Json[])
      await system?.call("DELETE", `${SNAPSHOTS}/${s.metadata.name}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  for (const [runtime, agent] of [
    ["reference", "assistant"],
    ["compass", "compass-assistant"],
  ] as const) {
    describe(`snapshot, fork and restore of a ${runtime} session (${options.engine})`, () => {
      const orig = n(`orig-${runtime}`);
      const fork = n(`fork-${runtime}`);
      const snap = n(`snap-${runtime}`);

      it("a snapshot of a session that was told a token and holds a file is Ready with its size", async () => {
        const put = await call("PUT", `${SESSIONS}/${orig}`, manifest(orig, agent, runtime));
        expect(put.status, JSON.stringify(put.body)).toBe(201);
        const ready = await phase(orig, "Ready");
        const told = await ask(orig, `remember ${TOKEN}`);
        expect(told.status, JSON.stringify(told.body)).toBe(200);
        expect(told.body.output).toContain(TOKEN);
        await writeFile(orig, "notes/plan.txt", "step one\n");

        const taken = await call("POST", `${SESSIONS}/${orig}:snapshot`, { name: snap });
        expect(taken.status, JSON.stringify(taken.body)).toBe(201);
        expect(taken.body).toMatchObject({
          kind: "SessionSnapshot",
          metadata: { name: snap, namespace: "default" },
          spec: {
            sessionRef: orig,
            agentRef: agent,
            runtimeRef: runtime,
            resolvedImageDigest: ready.status.resolvedImageDigest,
          },
          status: { phase: "Ready", engine: options.engine },
        });
        expect(taken.body.status.sizeBytes).toBeGreaterThan(0);
        expect(await storageExists(options.engine, taken.body.status.storage)).toBe(true);
        const listed = await call("GET", SNAPSHOTS);
        expect(listed.body.items.map((s: Json) => s.metadata.name)).toContain(snap);
      });

      it("a fork recalls the conversation and has the files", async () => {
        const put = await call(
          "PUT",
          `${SESSIONS}/${fork}`,
          manifest(fork, agent, runtime, { source: { snapshotRef: snap } }),
        );
        expect(put.status, JSON.stringify(put.body)).toBe(201);
        await phase(fork, "Ready");
        const recalled = await ask(fork, RECALL);
        expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
        expect(recalled.body.output).toContain(TOKEN);
        expect(await readFile(fork, "notes/plan.txt")).toBe("step one\n");
      });

      it("the fork and the original diverge: a file written in one is absent in the other", async () => {
        await writeFile(fork, "only-fork.txt", "fork\n");
        await writeFile(orig, "only-orig.txt", "orig\n");
        expect(await readFile(orig, "only-fork.txt")).toBe(404);
        expect(await readFile(fork, "only-orig.txt")).toBe(404);
        // spec.source is immutable.
        const patched = await call("PATCH", `${SESSIONS}/${fork}`, {
          spec: { source: { snapshotRef: "other" } },
        });
        expect(patched.status).toBe(400);
        expect(patched.body.message).toContain("spec.source is immutable");
      });

      it("restore drops what came after the snapshot: files and conversation", async () => {
        const told = await ask(orig, `remember ${LATER}`);
        expect(told.status).toBe(200);
        await writeFile(orig, "after.txt", "after\n");
        const restored = await call("POST", `${SESSIONS}/${orig}:restore`, { snapshot: snap });
        expect(restored.status, JSON.stringify(restored.body)).toBe(200);
        await phase(orig, "Ready");
        expect(await readFile(orig, "after.txt")).toBe(404);
        expect(await readFile(orig, "only-orig.txt")).toBe(404);
        expect(await readFile(orig, "notes/plan.txt")).toBe("step one\n");
        const recalled = await ask(orig, RECALL);
        expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
        expect(recalled.body.output).toContain(TOKEN);
        expect(recalled.body.output).not.toContain(LATER);
      });
    });
  }

  describe(`snapshots around requests, archives and deletes (${options.engine})`, () => {
    const busy = n("busy");

    it("a snapshot taken with a request in flight waits for it, then succeeds", async () => {
      expect(
        (await call("PUT", `${SESSIONS}/${busy}`, manifest(busy, "assistant", "reference"))).status,
      ).toBe(201);
      await phase(busy, "Ready");
      let answeredAt = 0;
      // "[slow]" streams one word every 200 ms: in flight for a few seconds.
      const inFlight = ask(
        busy,
        `[slow] remember ${TOKEN} and count one two three four five six seven eight`,
      ).then((r) => {
        answeredAt = Date.now();
        return r;
      });
      await until(
        "the request in flight",
        async () => {
          const s = await call("GET", `${SESSIONS}/${busy}`);
          return s.body.status.activeRequests > 0 ? true : undefined;
        },
        60_000,
      );
      const taken = await call("POST", `${SESSIONS}/${busy}:snapshot`, { name: n("busy-snap") });
      const snapshotAt = Date.now();
      expect(taken.status, JSON.stringify(taken.body)).toBe(201);
      expect(taken.body.status.phase).toBe("Ready");
      const reply = await inFlight;
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      expect(answeredAt).toBeLessThanOrEqual(snapshotAt);
    });

    it("an exported archive imported under another name forks like the snapshot it came from", async () => {
      const exported = await raw("GET", `${SNAPSHOTS}/${n("busy-snap")}/archive`);
      expect(exported.status).toBe(200);
      expect(exported.bytes.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
      const imported = await raw("PUT", `${SNAPSHOTS}/${n("imported")}/archive`, exported.bytes);
      expect(imported.status, imported.bytes.toString()).toBe(201);
      const made = JSON.parse(imported.bytes.toString());
      expect(made).toMatchObject({
        metadata: { name: n("imported") },
        spec: { sessionRef: busy, agentRef: "assistant", runtimeRef: "reference" },
        status: { phase: "Ready" },
      });
      const fork = n("from-import");
      const put = await call(
        "PUT",
        `${SESSIONS}/${fork}`,
        manifest(fork, "assistant", "reference", { source: { snapshotRef: n("imported") } }),
      );
      expect(put.status, JSON.stringify(put.body)).toBe(201);
      await phase(fork, "Ready");
      const recalled = await ask(fork, RECALL);
      expect(recalled.body.output).toContain(TOKEN);
    });

    it("deleting the session keeps its snapshots; deleting a snapshot frees its storage", async () => {
      const snap = await call("GET", `${SNAPSHOTS}/${n("busy-snap")}`);
      const storage = snap.body.status.storage as string;
      expect(storage).toBe(snapshotStorageName("default", n("busy-snap")));
      expect((await call("DELETE", `${SESSIONS}/${busy}`)).status).toBe(200);
      await until(
        "the session gone",
        async () => ((await call("GET", `${SESSIONS}/${busy}`)).status === 404 ? true : undefined),
        180_000,
      );
      expect((await call("GET", `${SNAPSHOTS}/${n("busy-snap")}`)).status).toBe(200);
      expect(await storageExists(options.engine, storage)).toBe(true);

      const deleted = await call("DELETE", `${SNAPSHOTS}/${n("busy-snap")}`);
      expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
      expect((await call("GET", `${SNAPSHOTS}/${n("busy-snap")}`)).status).toBe(404);
      await until(
        "the storage gone",
        async () => ((await storageExists(options.engine, storage)) ? undefined : true),
        120_000,
      );
    });

    it("bad input is refused with a clear 4xx and changes nothing", async () => {
      const before = (await call("GET", SNAPSHOTS)).body.items.length;
      // A fork of a snapshot that does not exist.
      const unknown = await call(
        "PUT",
        `${SESSIONS}/${n("nope")}`,
        manifest(n("nope"), "assistant", "reference", { source: { snapshotRef: "no-such-snapshot" } }),
      );
      expect(unknown.status).toBe(400);
      expect(unknown.body.message).toContain("no-such-snapshot");
      // A fork with another Agent and runtime than the snapshot's.
      const mismatch = await call(
        "PUT",
        `${SESSIONS}/${n("nope")}`,
        manifest(n("nope"), "compass-assistant", "compass", { source: { snapshotRef: n("imported") } }),
      );
      expect(mismatch.status).toBe(400);
      expect(mismatch.body.message).toMatch(/agent|runtime/i);
      expect((await call("GET", `${SESSIONS}/${n("nope")}`)).status).toBe(404);
      // A snapshot name that is not a DNS label; a snapshot of a session that does not exist.
      const badName = await call("POST", `${SESSIONS}/${n("fork-reference")}:snapshot`, {
        name: "Not_A_Label",
      });
      expect(badName.status).toBe(400);
      expect((await call("POST", `${SESSIONS}/no-such-session:snapshot`, { name: "x" })).status).toBe(404);
      // Restore from a snapshot that does not exist.
      expect(
        (await call("POST", `${SESSIONS}/${n("fork-reference")}:restore`, { snapshot: "no-such" })).status,
      ).toBe(404);
      // An archive whose entry escapes the root.
      const manifestJson = JSON.stringify({
        format: "agent-sessions.dev/snapshot-archive/v1",
        source: { namespace: "default", name: "evil" },
        spec: {
          sessionRef: "x",
          agentRef: "assistant",
          runtimeRef: "reference",
          resolvedImageDigest: "sha256:0",
        },
        sizeBytes: 4,
        createdAt: new Date().toISOString(),
      });
      for (const evil of [
        { name: "volume/../../etc/evil", body: "evil" },
        { name: "/etc/evil", body: "evil" },
        { name: "volume/link", type: "2" as const, link: "../../etc/passwd" },
        { name: "volume/hard", type: "1" as const, link: "/etc/passwd" },
        { name: "volume/dev", type: "3" as const },
      ]) {
        const archive = tarGz([{ name: "manifest.json", body: manifestJson }, evil]);
        const put = await raw("PUT", `${SNAPSHOTS}/${n("evil")}/archive`, archive);
        expect(put.status, `${evil.name}: ${put.bytes.toString()}`).toBe(400);
      }
      // Truncated.
      const whole = tarGz([
        { name: "manifest.json", body: manifestJson },
        { name: "volume/a.txt", body: "a" },
      ]);
      const truncated = await raw(
        "PUT",
        `${SNAPSHOTS}/${n("evil")}/archive`,
        whole.subarray(0, whole.length - 20),
      );
      expect(truncated.status).toBe(400);
      expect((await call("GET", `${SNAPSHOTS}/${n("evil")}`)).status).toBe(404);
      // A chat token can do none of it.
      const token = await call("POST", "/v1/tokens", {
        name: n("chat-only"),
        scopes: [`session:default/${n("fork-reference")}:chat`],
      });
      expect(token.status, JSON.stringify(token.body)).toBe(201);
      const chat = token.body.token as string;
      expect(
        (await call("POST", `${SESSIONS}/${n("fork-reference")}:snapshot`, { name: "by-chat" }, chat)).status,
      ).toBe(403);
      expect(
        (await call("POST", `${SESSIONS}/${n("fork-reference")}:restore`, { snapshot: n("imported") }, chat))
          .status,
      ).toBe(403);
      expect((await call("GET", `${SNAPSHOTS}/${n("imported")}/archive`, undefined, chat)).status).toBe(403);
      expect((await call("GET", SNAPSHOTS)).body.items.length).toBe(before);
    });
  });
}
