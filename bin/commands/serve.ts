import { join } from "node:path";
import { runnerSettingsError, UsageError } from "../cli-context.ts";
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
      // No default here: unset, the runner's config reads AGENT_SESSIONS_ENGINE (default docker).
      engine: { type: "string" },
      "no-runner": { type: "boolean", default: false },
    });
    if (values.engine !== undefined && values.engine !== "docker" && values.engine !== "kubernetes")
      throw new UsageError("--engine must be docker or kubernetes");
    const { parseConfig } = await import("../../proxy/config.ts");
    const { startServer } = await import("../../proxy/main.ts");
    const config = parseConfig(
      {
        ...process.env,
        ...(values.port ? { AGENT_SESSIONS_PORT: values.port } : {}),
        ...(values["data-dir"] ? { AGENT_SESSIONS_DATA_DIR: values["data-dir"] } : {}),
      },
      // The images the test bed built, where the environment names none.
      shippedImageSettings(),
    );
    const server = await startServer(config);
    process.stderr.write(
      `${JSON.stringify({ level: "info", msg: "server listening", url: server.url, dataDir: config.dataDir, adminTokenFile: config.adminTokenFile, credentialEnv: config.credentialEnv })}\n`,
    );
    let runner: { stop(): void } | undefined;
    if (!values["no-runner"]) {
      const { parseRunnerConfig, startRunner } = await import("../../runner/main.ts");
      let runnerConfig: ReturnType<typeof parseRunnerConfig>;
      try {
        runnerConfig = parseRunnerConfig(
          {
            ...process.env,
            AGENT_SESSIONS_SERVER_URL: server.url,
            // Its own credential, issued in process on every start: nothing to register or keep.
            AGENT_SESSIONS_RUNNER_TOKEN: await server.issueRunnerCredential("embedded"),
            AGENT_SESSIONS_RUNNER_DATA_DIR: join(config.dataDir, "runner"),
            ...(values.engine ? { AGENT_SESSIONS_ENGINE: values.engine } : {}),
            AGENT_SESSIONS_RUNNER_NAME: "embedded",
          },
          // The test bed's base image has git: workspaces seeded from repositories (issue 18).
          { AGENT_SESSIONS_GIT_IMAGE: testbedImage("base-image") },
        );
      } catch (error) {
        // A bad runner setting: say which, and do not leave a server without its runner up.
        await server.close();
        throw runnerSettingsError(error);
      }
      runner = await startRunner(
        runnerConfig,
        runnerConfig.embeddedLink === "websocket" ? {} : { dial: server.dialRunner },
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
