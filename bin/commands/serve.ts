import { join } from "node:path";
import { UsageError } from "../cli-context.ts";
import { type Command, parseCommand } from "../command.ts";
import { shippedImageSettings, testbedImage } from "../testbed-image.ts";

const USAGE = "serve [--port 8787] [--data-dir DIR] [--engine docker|kubernetes] [--no-runner]";

/**
 * `serve`: the server and, unless --no-runner, an embedded runner. The two share this process,
 * so the runner's link is an in-process channel (contracts/runner-channel.ts), not a loopback
 * WebSocket: the same protocol, one socket hop and its wake-ups fewer on every relayed request.
 * `AGENT_SESSIONS_EMBEDDED_LINK=websocket` keeps the loopback WebSocket (to compare the two).
 */
export const serve: Command = {
  name: "serve",
  usage: USAGE,
  summary: "start the server (and an embedded runner)",
  async run(argv) {
    const { values } = parseCommand(argv, USAGE, {
      port: { type: "string" },
      engine: { type: "string", default: process.env.AGENT_SESSIONS_ENGINE ?? "docker" },
      "no-runner": { type: "boolean", default: false },
    });
    if (values.engine !== "docker" && values.engine !== "kubernetes")
      throw new UsageError("--engine must be docker or kubernetes");
    const { parseConfig } = await import("../../proxy/config.ts");
    const { startServer } = await import("../../proxy/main.ts");
    const config = parseConfig({
      ...process.env,
      ...(values.port ? { AGENT_SESSIONS_PORT: values.port } : {}),
      ...(values["data-dir"] ? { AGENT_SESSIONS_DATA_DIR: values["data-dir"] } : {}),
      ...shippedImageSettings(),
    });
    const server = await startServer(config);
    process.stderr.write(
      `${JSON.stringify({ level: "info", msg: "server listening", url: server.url, dataDir: config.dataDir, adminTokenFile: process.env.AGENT_SESSIONS_TOKEN ? undefined : join(config.dataDir, "admin-token"), credentialEnv: config.credentialEnv })}\n`,
    );
    let runner: { stop(): void } | undefined;
    if (!values["no-runner"]) {
      const { parseRunnerConfig, startRunner } = await import("../../runner/main.ts");
      runner = await startRunner(
        parseRunnerConfig(process.env, {
          serverUrl: server.url,
          // Its own credential, issued in process on every start: nothing to register or keep.
          token: await server.issueRunnerCredential("embedded"),
          dataDir: join(config.dataDir, "runner"),
          engine: values.engine,
          name: "embedded",
          // The test bed's base image has git: workspaces seeded from repositories (issue 18).
          gitImage: testbedImage("AGENT_SESSIONS_GIT_IMAGE", "base-image"),
        }),
        process.env.AGENT_SESSIONS_EMBEDDED_LINK === "websocket" ? {} : { dial: server.dialRunner },
      );
    }
    const shutdown = async () => {
      runner?.stop();
      await server.close();
      process.exit(0);
    };
    process.once("SIGINT", () => void shutdown());
    process.once("SIGTERM", () => void shutdown());
    // Runs until a signal: the process stays up on its listeners.
    return new Promise<never>(() => {});
  },
};
