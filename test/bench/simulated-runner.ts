/**
 * A runner with a simulated engine, for the scale benchmark only: the real runner (link,
 * protocol, authoritative session set: runner/runner.ts) over SimulatedDriver instead of Docker
 * or Kubernetes. Run as its own process, forked with an IPC channel:
 *
 *   AGENT_SESSIONS_SERVER_URL=… AGENT_SESSIONS_RUNNER_TOKEN=… AGENT_SESSIONS_RUNNER_DATA_DIR=… \
 *     node test/bench/simulated-runner.ts
 *
 * IPC messages (parent → runner): `{type: "status"}` → `{type: "status", attached, agents}`;
 * `{type: "emitting", sessions}` → `{type: "emitting", containers}` (the workspaces `emit` uses);
 * `{type: "emit", count, sessions, perSecond}` → `{type: "emitted", emitted, ms}`.
 */
import { z } from "zod";
import { parseRunnerConfig } from "../../runner/config.ts";
import { jsonLog, type Log, Runner } from "../../runner/runner.ts";
import { SimulatedDriver } from "./simulated-driver.ts";

const Control = z.discriminatedUnion("type", [
  z.object({ type: z.literal("status") }),
  z.object({ type: z.literal("emitting"), sessions: z.number().int().positive() }),
  z.object({
    type: z.literal("emit"),
    count: z.number().int().nonnegative(),
    sessions: z.number().int().positive(),
    perSecond: z.number().positive(),
  }),
]);

/** The real runner over the simulated driver; logs warnings and errors only (10,000 starts are noise). */
export async function startSimulatedRunner(
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ runner: Runner; driver: SimulatedDriver }> {
  const config = parseRunnerConfig(
    { ...env, AGENT_SESSIONS_ENGINE: "docker" },
    { AGENT_SESSIONS_RUNNER_NAME: "simulated", AGENT_SESSIONS_RUNNER_CAPACITY: "100000" },
  );
  const full = jsonLog("simulated-runner");
  const log: Log = (level, msg, fields) => {
    if (level !== "info") full(level, msg, fields);
  };
  const driver = new SimulatedDriver();
  // No adapter behind the simulated driver's endpoints: the relay path counts as up.
  const runner = new Runner(config, driver, log, { probeAdapter: async () => {} });
  await runner.start();
  return { runner, driver };
}

async function main(): Promise<void> {
  const { runner, driver } = await startSimulatedRunner();
  const reply = (message: Record<string, unknown>) => process.send?.(message);
  process.on("message", (raw) => {
    const parsed = Control.safeParse(raw);
    if (!parsed.success) {
      reply({ type: "error", message: parsed.error.message });
      return;
    }
    const message = parsed.data;
    switch (message.type) {
      case "status":
        reply({ type: "status", attached: runner.link.attached, agents: driver.agentCount });
        return;
      case "emitting":
        reply({ type: "emitting", containers: driver.emitting(message.sessions) });
        return;
      case "emit":
        driver.emit(message.count, message.sessions, message.perSecond).then(
          (done) => reply({ type: "emitted", ...done }),
          (error: unknown) => reply({ type: "error", message: String(error) }),
        );
        return;
    }
  });
  const stop = () => {
    runner.stop();
    process.exit(0);
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  process.once("disconnect", stop);
}

if (import.meta.main) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
