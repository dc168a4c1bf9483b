import { resolve } from "node:path";
import { UsageError } from "../cli-context.ts";
import { type Command, parseCommand } from "../command.ts";
import { testbedImage } from "../testbed-image.ts";

const USAGE =
  "runner --server URL [--data-dir DIR] [--engine docker|kubernetes] [--name NAME] [--capacity N] [--label KEY=VALUE]...";

/**
 * `runner`: a standalone runner dialing the server (token: $AGENT_SESSIONS_RUNNER_TOKEN, the runner
 * token — it registers the name once and the runner keeps its own credential in
 * `<data-dir>/runner-credential` — or a credential from `runners token create`). It
 * advertises `--capacity` (workspaces it takes; $AGENT_SESSIONS_RUNNER_CAPACITY, default 100) and
 * `--label`s (repeatable, or comma-separated; $AGENT_SESSIONS_RUNNER_LABELS) for placement.
 */
export const runner: Command = {
  name: "runner",
  usage: USAGE,
  summary: "start a standalone runner that dials the server",
  async run(argv) {
    const { values } = parseCommand(argv, USAGE, {
      engine: { type: "string" },
      name: { type: "string" },
      capacity: { type: "string" },
      label: { type: "string", multiple: true },
    });
    if (!values.server && !process.env.AGENT_SESSIONS_SERVER_URL)
      throw new UsageError("--server URL is required");
    if (values.engine !== undefined && values.engine !== "docker" && values.engine !== "kubernetes")
      throw new UsageError("--engine must be docker or kubernetes");
    const capacity = values.capacity === undefined ? undefined : Number(values.capacity);
    if (capacity !== undefined && !(Number.isInteger(capacity) && capacity > 0))
      throw new UsageError(`--capacity must be a positive integer, got ${values.capacity}`);
    const { parseRunnerConfig, startRunner } = await import("../../runner/main.ts");
    const { parseLabelPairs, RunnerConfig } = await import("../../runner/config.ts");
    let labels: Record<string, string> | undefined;
    try {
      labels = values.label ? parseLabelPairs(values.label) : undefined;
    } catch (error) {
      throw new UsageError(`--label: ${(error as Error).message}`);
    }
    const gitImage = testbedImage("AGENT_SESSIONS_GIT_IMAGE", "base-image");
    const overrides = {
      ...(values.server ? { serverUrl: values.server } : {}),
      dataDir: values["data-dir"] ?? resolve(".data/runner"),
      ...(values.engine ? { engine: values.engine as "docker" | "kubernetes" } : {}),
      ...(values.name ? { name: values.name } : {}),
      ...(capacity !== undefined ? { capacity } : {}),
      ...(labels ? { labels } : {}),
      // As `serve`'s embedded runner: the test bed's base image has git (repository workspaces).
      ...(gitImage !== undefined ? { gitImage } : {}),
    };
    // Names and labels are checked before anything starts: a usage error, not a crash.
    for (const field of ["name", "labels"] as const) {
      const checked = RunnerConfig.shape[field].safeParse(overrides[field]);
      if (overrides[field] !== undefined && !checked.success)
        throw new UsageError(
          `--${field === "name" ? "name" : "label"}: ${checked.error.issues.map((i) => i.message).join("; ")}`,
        );
    }
    let config: ReturnType<typeof parseRunnerConfig>;
    try {
      config = parseRunnerConfig(process.env, overrides);
    } catch (error) {
      const issues = (error as { issues?: { path: PropertyKey[]; message: string }[] }).issues;
      if (!issues) throw error;
      throw new UsageError(issues.map((i) => `${i.path.map(String).join(".")}: ${i.message}`).join("; "));
    }
    const r = await startRunner(config);
    const stop = () => {
      r.stop();
      process.exit(0);
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    return new Promise<never>(() => {});
  },
};
