import { resolve } from "node:path";
import { runnerSettingsError, UsageError } from "../cli-context.ts";
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
  flags: [
    ["--server URL", "the server to dial (required)"],
    ["--engine docker|kubernetes", "the engine it drives (default $AGENT_SESSIONS_ENGINE, else docker)"],
    ["--name NAME", "its name (default: the host name)"],
    ["--capacity N", "how many live sessions it takes (default 100)"],
    ["--label KEY=VALUE", "a placement label; repeatable or comma-separated"],
  ],
  examples: [
    "AGENT_SESSIONS_RUNNER_TOKEN=\u2026 agent-sessions runner --server http://10.0.0.5:8787 --label gpu=true",
  ],
  async run(argv) {
    const { values } = parseCommand(argv, USAGE, {
      engine: { type: "string" },
      name: { type: "string" },
      capacity: { type: "string" },
      label: { type: "string", multiple: true },
    });
    if (values.engine !== undefined && values.engine !== "docker" && values.engine !== "kubernetes")
      throw new UsageError("--engine must be docker or kubernetes");
    const capacity = values.capacity === undefined ? undefined : Number(values.capacity);
    if (capacity !== undefined && !(Number.isInteger(capacity) && capacity > 0))
      throw new UsageError(`--capacity must be a positive integer, got ${values.capacity}`);
    const { parseRunnerConfig, startRunner } = await import("../../runner/main.ts");
    const { parseLabelPairs } = await import("../../runner/config.ts");
    const { RunnerLabels, RunnerName } = await import("../../contracts/runners.ts");
    let labels: Record<string, string> | undefined;
    try {
      labels = values.label ? parseLabelPairs(values.label) : undefined;
    } catch (error) {
      throw new UsageError(`--label: ${(error as Error).message}`);
    }
    // Names and labels are checked before anything starts, as flags: a usage error naming the flag.
    for (const [flag, schema, value] of [
      ["name", RunnerName, values.name],
      ["label", RunnerLabels, labels],
    ] as const) {
      const checked = schema.safeParse(value);
      if (value !== undefined && !checked.success)
        throw new UsageError(`--${flag}: ${checked.error.issues.map((i) => i.message).join("; ")}`);
    }
    const labelList = labels ? Object.entries(labels).map(([k, v]) => `${k}=${v}`) : undefined;
    let config: ReturnType<typeof parseRunnerConfig>;
    try {
      // The flags win over the variables they stand for; the runner's config reads the rest.
      config = parseRunnerConfig(
        {
          ...process.env,
          ...(values.server ? { AGENT_SESSIONS_SERVER_URL: values.server } : {}),
          AGENT_SESSIONS_RUNNER_DATA_DIR: values["data-dir"] ?? resolve(".data/runner"),
          ...(values.engine ? { AGENT_SESSIONS_ENGINE: values.engine } : {}),
          ...(values.name ? { AGENT_SESSIONS_RUNNER_NAME: values.name } : {}),
          ...(capacity !== undefined ? { AGENT_SESSIONS_RUNNER_CAPACITY: String(capacity) } : {}),
          ...(labelList ? { AGENT_SESSIONS_RUNNER_LABELS: labelList.join(",") } : {}),
        },
        // As `serve`'s embedded runner: the test bed's base image has git (repository workspaces).
        { AGENT_SESSIONS_GIT_IMAGE: testbedImage("base-image") },
      );
    } catch (error) {
      throw runnerSettingsError(error);
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
