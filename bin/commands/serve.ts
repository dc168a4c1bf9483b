import { join } from "node:path";
import { runnerSettingsError, UsageError } from "../cli-context.ts";
import { type Command, parseCommand } from "../command.ts";
import { shippedImageSettings, testbedImage } from "../testbed-image.ts";

const USAGE = "serve [--port 8787] [--data-dir DIR] [--engine docker|kubernetes] [--no-runner]";

/**
 * `serve`: the server and, unless --no-runner, an embedded runner. The two share this process;
 * the runner runs on a worker thread of its own (bin/embedded-runner/thread.ts), so server and
 * runner each have an event loop (and a core), linked by a port (contracts/runner-port-channel.ts)
 * instead of a loopback WebSocket: the same protocol. `AGENT_SESSIONS_EMBEDDED_LINK=in-process`
 * runs the runner on the server's thread linked in memory (contracts/runner-channel.ts),
 * `websocket` on the server's thread over the loopback WebSocket (to compare them).
 */
export const serve: Command = {
  name: "serve",
  usage: USAGE,
  summary: "start the server (and an embedded runner)",
  flags: [
    ["--port PORT", "listen port (default 8787, $AGENT_SESSIONS_PORT)"],
    ["--engine docker|kubernetes", "the embedded runner's engine (default docker)"],
    ["--no-runner", "no embedded runner: runners dial in (agent-sessions runner)"],
  ],
  examples: [
    "agent-sessions serve",
    "agent-sessions serve --data-dir /var/lib/agent-sessions --engine kubernetes",
  ],
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
    let runner: { stop(): void | Promise<void> } | undefined;
    if (!values["no-runner"]) {
      let runnerConfig: Awaited<ReturnType<typeof embeddedRunnerConfig>>;
      try {
        runnerConfig = await embeddedRunnerConfig(process.env, {
          serverUrl: server.url,
          // Its own credential, issued in process on every start: nothing to register or keep.
          token: await server.issueRunnerCredential("embedded"),
          dataDir: config.dataDir,
          engine: values.engine,
        });
      } catch (error) {
        // A bad runner setting: say which, and do not leave a server without its runner up.
        await server.close();
        throw runnerSettingsError(error);
      }
      try {
        if (runnerConfig.embeddedLink === "worker") {
          const { startRunnerThread } = await import("../embedded-runner/thread.ts");
          const thread = await startRunnerThread(runnerConfig, server.admitRunnerChannel);
          runner = thread;
          // A runner thread that dies leaves a server whose sessions nobody runs: serve ends too,
          // as it would if the runner shared its thread and threw.
          void thread.ended.then(async (error) => {
            process.stderr.write(
              `${JSON.stringify({ level: "error", msg: "the embedded runner ended; the server stops", error: error.message })}\n`,
            );
            await server.close();
            process.exit(1);
          });
        } else {
          const { startRunner } = await import("../../runner/main.ts");
          runner = await startRunner(
            runnerConfig,
            runnerConfig.embeddedLink === "websocket" ? {} : { dial: server.dialRunner },
          );
        }
      } catch (error) {
        // A server whose only runner cannot start would look healthy and keep every session
        // Pending (issue 34 item 2): it stops, and the CLI exits non-zero with the runner's reason.
        await server.close();
        throw error;
      }
    }
    const shutdown = async () => {
      await runner?.stop();
      await server.close();
      process.exit(0);
    };
    process.once("SIGINT", () => void shutdown());
    process.once("SIGTERM", () => void shutdown());
    // Runs until a signal: the process stays up on its listeners.
    return new Promise<never>(() => {});
  },
};

/** Addresses a server listens on when it listens on every interface, and where it is then reached locally. */
const UNSPECIFIED_TO_LOOPBACK: Readonly<Record<string, string>> = { "0.0.0.0": "127.0.0.1", "[::]": "[::1]" };

/**
 * The embedded runner's configuration, from the server it belongs to and the environment.
 *
 * Its link is in process (a port to a worker thread, or in memory; or, with
 * AGENT_SESSIONS_EMBEDDED_LINK=websocket, a socket to this process's own listener): it never leaves this machine, whatever address the server listens on
 * (issue 34 item 1). Listening on every interface (`0.0.0.0`, `::`, as in a container) it dials
 * loopback; listening on one address of this machine, that address, which the server has just
 * bound, so the runner's "not on this machine and not TLS" refusal (runner/config.ts) does not
 * apply and no user-facing switch is needed.
 */
export async function embeddedRunnerConfig(
  source: NodeJS.ProcessEnv,
  server: { serverUrl: string; token: string; dataDir: string; engine?: string | undefined },
) {
  const { parseRunnerConfig } = await import("../../runner/main.ts");
  const { isLoopbackHost } = await import("../../runner/config.ts");
  const url = new URL(server.serverUrl);
  url.hostname = UNSPECIFIED_TO_LOOPBACK[url.hostname] ?? url.hostname;
  return parseRunnerConfig(
    {
      ...source,
      AGENT_SESSIONS_SERVER_URL: url.origin,
      ...(isLoopbackHost(url.hostname) ? {} : { AGENT_SESSIONS_RUNNER_ALLOW_INSECURE: "true" }),
      AGENT_SESSIONS_RUNNER_TOKEN: server.token,
      AGENT_SESSIONS_RUNNER_DATA_DIR: join(server.dataDir, "runner"),
      ...(server.engine ? { AGENT_SESSIONS_ENGINE: server.engine } : {}),
      AGENT_SESSIONS_RUNNER_NAME: "embedded",
    },
    // The test bed's base image has git: workspaces seeded from repositories (issue 18).
    { AGENT_SESSIONS_GIT_IMAGE: testbedImage("base-image") },
  );
}
