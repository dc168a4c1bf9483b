/**
 * Expiry of HarnessSessions (issue 40) on one engine, real parts only: a server and a runner over
 * the real WebSocket, real Pulumi stacks, the engine and the reference runtime. What a user checks:
 * a session with `ttl: 30s` says when it ends, is gone after it (the API answers 404, its engine
 * objects are gone), its snapshot stays Ready with its storage on the engine, and its event stream
 * said why (an `Expired` event).
 */
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe, kubernetesProbe, objectsGone } from "../support/engine-probes.ts";
import {
  followEvents,
  type Json,
  System,
  startSessionModelServer,
  until,
  writeLogTails,
} from "../support/system.ts";
import { storageExists } from "./session-snapshot-scenarios.ts";

export type ExpiryScenarioOptions = {
  engine: "docker" | "kubernetes";
  /** Appended to every session and snapshot name: the cluster is shared by test files. */
  suffix?: string;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SNAPSHOTS = `${NS}/sessionsnapshots`;
const READY_MS = 300_000;

export function sessionExpiryScenarios(options: ExpiryScenarioOptions): void {
  const n = (name: string) => `${name}${options.suffix ?? ""}`;
  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  const call = (method: string, path: string, body?: unknown) => system.call(method, path, body);

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
    probe = options.engine === "docker" ? dockerProbe() : await kubernetesProbe();
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const put = await call("PUT", `${NS}/agents/assistant`, modelAgent("assistant", model));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    await system?.call("DELETE", `${SESSIONS}/${n("brief")}`).catch(() => undefined);
    await system?.call("DELETE", `${SNAPSHOTS}/${n("brief-snap")}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`expiry (${options.engine})`, () => {
    it("a session with ttl 30s is gone after it; its snapshot stays; its events say why", async () => {
      const name = n("brief");
      const put = await call("PUT", `${SESSIONS}/${name}`, {
        apiVersion: "agent-sessions.dev/v1alpha1",
        kind: "HarnessSession",
        metadata: { name },
        spec: { agentRef: "assistant", runtimeRef: "reference", ttl: "30s" },
      });
      expect(put.status, JSON.stringify(put.body)).toBe(201);
      const ready: Json = await until(
        `${name} Ready`,
        async () => {
          const s = await call("GET", `${SESSIONS}/${name}`);
          if (s.body.status?.phase === "Ready") return s.body;
          throw new Error(`phase ${s.body.status?.phase}`);
        },
        READY_MS,
      );
      const expiresAt = Date.parse(ready.status.expiresAt);
      expect(expiresAt).toBe(Date.parse(ready.metadata.creationTimestamp) + 30_000);
      const workload = ready.status.containerName as string;
      expect(Object.values(await probe.objects(workload))).not.toContain(false);
      const events = followEvents(system, `?session_id=${ready.status.sessionId}`);
      try {
        const taken = await call("POST", `${SESSIONS}/${name}:snapshot`, { name: n("brief-snap") });
        expect(taken.status, JSON.stringify(taken.body)).toBe(201);
        expect(Date.now()).toBeLessThan(expiresAt); // the snapshot was taken of a live session
        await until(
          `${name} gone`,
          async () => ((await call("GET", `${SESSIONS}/${name}`)).status === 404 ? true : undefined),
          120_000,
        );
        expect(Date.now()).toBeGreaterThanOrEqual(expiresAt);
        expect((await objectsGone(probe, workload)).length).toBeGreaterThan(2);
        const expired = await until(
          "an Expired event",
          () =>
            events.events.find((e: Json) => e.data?.type === "log" && e.data?.payload?.event === "Expired"),
          30_000,
        );
        expect((expired as Json).data.payload).toMatchObject({
          reason: "Expired",
          harness_session: { namespace: "default", name },
          expiresAt: ready.status.expiresAt,
        });
      } finally {
        await events.close();
      }
      const snap = await call("GET", `${SNAPSHOTS}/${n("brief-snap")}`);
      expect(snap.status).toBe(200);
      expect(snap.body.status.phase).toBe("Ready");
      expect(await storageExists(options.engine, snap.body.status.storage)).toBe(true);
    }, 600_000);
  });
}
