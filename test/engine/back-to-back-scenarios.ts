/**
 * A HarnessSession stopped and resumed back to back through the HTTP API of a real system
 * (`serve --no-runner` and a `runner --engine …`, real engine, real Pulumi stacks, the reference
 * runtime): stop → resume → stop → resume, each PATCH sent as soon as the previous step reached its
 * phase, never waiting for the stack's recordings (runner/engine/fast-path.ts). The session ends
 * Ready with its conversation, the last resume's workload is the one running, and once the
 * recordings are done (`policy check` waits for them) the stack shows no drift.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { EngineProbe } from "../support/engine-probes.ts";
import { type Json, startSessionModelServer, System, until, writeLogTails } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";

export function backToBackScenarios(options: {
  engine: "docker" | "kubernetes";
  probe: () => EngineProbe | Promise<EngineProbe>;
}): void {
  applyTestbedEnv();
  const NAME = `b2b-${randomBytes(3).toString("hex")}`;
  const URL = `${NS}/harnesssessions/${NAME}`;
  const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;

  const session = async (): Promise<Json> => (await system.call("GET", URL)).body;
  const phase = (want: string) =>
    until(
      `${NAME} ${want}`,
      async () => ((await session()).status?.phase === want ? session() : undefined),
      180_000,
    );
  const patch = async (desiredState: "running" | "stopped") =>
    expect((await system.call("PATCH", URL, { spec: { desiredState } })).status).toBe(200);
  const ask = (input: string) => system.call("POST", `${URL}/requests`, { input });

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-b2b-${randomBytes(8).toString("hex")}`;
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    expect((await system.call("PUT", `${NS}/agents/b2b`, modelAgent("b2b", model))).status).toBe(201);
  });

  afterAll(async () => {
    await system?.call("DELETE", URL).catch(() => undefined);
    probe?.close();
    await system?.stop();
    await model?.close();
  });

  describe(`back to back (real engine: ${options.engine})`, () => {
    it("stop → resume → stop → resume issued back to back ends Ready with its conversation, the last workload running, and no drift once recorded", async (context) => {
      context.onTestFailed(() => writeLogTails(system));
      const put = await system.call("PUT", URL, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name: NAME },
        spec: { agentRef: "b2b", runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
      });
      expect(put.status).toBe(201);
      const ready = await phase("Ready");
      const container: string = ready.status.containerName;
      expect((await ask(`remember ${TOKEN}`)).status).toBe(200);
      for (let i = 0; i < 2; i++) {
        await patch("stopped");
        await phase("Stopped");
        await patch("running");
        await phase("Ready");
      }
      expect(await probe.running(container)).toBe(true);
      const recalled = await ask("what token did I give you?");
      expect(recalled.status).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
      // `policy check` waits for the runner's pending recordings (stacks/recording.ts).
      // The stack is named after the workload (as harness-scenarios.ts finds it).
      const stack = `default--${container.replace(/^as-default-/, "")}`;
      const run = await system.runCli([
        "policy",
        "check",
        "-s",
        stack,
        "--expect-no-changes",
        "--refresh",
        "--data-dir",
        system.dataDir,
      ]);
      expect(run.stdout, `${run.stdout}${run.stderr.slice(-2000)}`).toContain(
        `${stack}: no policy violations, no changes (refreshed)`,
      );
      expect(run.code).toBe(0);
      // No recording undid the last resume: the session still answers from the same workload.
      expect(await probe.running(container)).toBe(true);
      expect((await session()).status.phase).toBe("Ready");
      expect((await ask("what token did I give you?")).body.output).toBe(`The token is ${TOKEN}.`);
    });
  });
}
