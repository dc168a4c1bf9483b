/**
 * `agent-sessions` — serve (server + embedded runner), runner (standalone).
 * Exit codes: 0 ok, 1 failure, 2 usage error.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

const USAGE = `usage:
  agent-sessions serve [--port 8787] [--data-dir DIR] [--engine docker|kubernetes] [--no-runner]
  agent-sessions runner --server URL [--data-dir DIR] [--engine docker|kubernetes] [--name NAME]
`;

function usage(message: string): never {
  process.stderr.write(`agent-sessions: ${message}\n${USAGE}`);
  process.exit(2);
}

/** The reference image the test bed built, when AGENT_SESSIONS_REFERENCE_IMAGE is not set. */
function referenceImage(): string | undefined {
  if (process.env.AGENT_SESSIONS_REFERENCE_IMAGE) return process.env.AGENT_SESSIONS_REFERENCE_IMAGE;
  const file = join(
    process.env.AGENT_SESSIONS_TESTBED_HOME ?? "/var/cache/agent-sessions-testbed",
    "state",
    "reference-image.json",
  );
  return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { image: string }).image : undefined;
}

async function serve(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: "string" },
      "data-dir": { type: "string" },
      engine: { type: "string", default: process.env.AGENT_SESSIONS_ENGINE ?? "docker" },
      "no-runner": { type: "boolean", default: false },
    },
  });
  if (values.engine !== "docker" && values.engine !== "kubernetes")
    usage(`--engine must be docker or kubernetes`);
  const { parseConfig } = await import("../proxy/config.ts");
  const { startServer } = await import("../proxy/main.ts");
  const image = referenceImage();
  const config = parseConfig({
    ...process.env,
    ...(values.port ? { AGENT_SESSIONS_PORT: values.port } : {}),
    ...(values["data-dir"] ? { AGENT_SESSIONS_DATA_DIR: values["data-dir"] } : {}),
    ...(image ? { AGENT_SESSIONS_REFERENCE_IMAGE: image } : {}),
  });
  const server = await startServer(config);
  process.stderr.write(
    `${JSON.stringify({ level: "info", msg: "server listening", url: server.url, dataDir: config.dataDir, adminTokenFile: process.env.AGENT_SESSIONS_TOKEN ? undefined : join(config.dataDir, "admin-token") })}\n`,
  );
  let runner: { stop(): void } | undefined;
  if (!values["no-runner"]) {
    const { parseRunnerConfig, startRunner } = await import("../runner/main.ts");
    runner = await startRunner(
      parseRunnerConfig(process.env, {
        serverUrl: server.url,
        token: config.runnerToken,
        dataDir: join(config.dataDir, "runner"),
        engine: values.engine,
        name: "embedded",
      }),
    );
  }
  const shutdown = async () => {
    runner?.stop();
    await server.close();
    process.exit(0);
  };
  process.once("SIGINT", () => void shutdown());
  process.once("SIGTERM", () => void shutdown());
}

async function runner(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      server: { type: "string" },
      "data-dir": { type: "string", default: resolve(".data/runner") },
      engine: { type: "string" },
      name: { type: "string" },
    },
  });
  if (!values.server && !process.env.AGENT_SESSIONS_SERVER_URL) usage("--server URL is required");
  const { parseRunnerConfig, startRunner } = await import("../runner/main.ts");
  const r = await startRunner(
    parseRunnerConfig(process.env, {
      ...(values.server ? { serverUrl: values.server } : {}),
      dataDir: values["data-dir"],
      ...(values.engine ? { engine: values.engine as "docker" | "kubernetes" } : {}),
      ...(values.name ? { name: values.name } : {}),
    }),
  );
  process.once("SIGINT", () => {
    r.stop();
    process.exit(0);
  });
  process.once("SIGTERM", () => {
    r.stop();
    process.exit(0);
  });
}

const [command, ...rest] = process.argv.slice(2);
try {
  switch (command) {
    case "serve":
      await serve(rest);
      break;
    case "runner":
      await runner(rest);
      break;
    case undefined:
    case "help":
    case "--help":
      process.stdout.write(USAGE);
      break;
    default:
      usage(`unknown command ${command}`);
  }
} catch (error) {
  process.stderr.write(`agent-sessions: ${(error as Error).message}\n`);
  process.exit(1);
}
