import { resolve } from "node:path";
import { UsageError } from "../cli-context.ts";
import { type Command, parseCommand } from "../command.ts";

const USAGE = "runner --server URL [--data-dir DIR] [--engine docker|kubernetes] [--name NAME]";

/** `runner`: a standalone runner dialing the server (token: $AGENT_SESSIONS_RUNNER_TOKEN). */
export const runner: Command = {
  name: "runner",
  usage: USAGE,
  summary: "start a standalone runner that dials the server",
  async run(argv) {
    const { values } = parseCommand(argv, USAGE, {
      engine: { type: "string" },
      name: { type: "string" },
    });
    if (!values.server && !process.env.AGENT_SESSIONS_SERVER_URL)
      throw new UsageError("--server URL is required");
    if (values.engine !== undefined && values.engine !== "docker" && values.engine !== "kubernetes")
      throw new UsageError("--engine must be docker or kubernetes");
    const { parseRunnerConfig, startRunner } = await import("../../runner/main.ts");
    const r = await startRunner(
      parseRunnerConfig(process.env, {
        ...(values.server ? { serverUrl: values.server } : {}),
        dataDir: values["data-dir"] ?? resolve(".data/runner"),
        ...(values.engine ? { engine: values.engine } : {}),
        ...(values.name ? { name: values.name } : {}),
      }),
    );
    const stop = () => {
      r.stop();
      process.exit(0);
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    return new Promise<never>(() => {});
  },
};
