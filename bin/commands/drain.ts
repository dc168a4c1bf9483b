import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { formatData } from "../render.ts";
import { runnerTable } from "./runners.ts";

const USAGE = "drain RUNNER   (no new placements on it; its live sessions stay where they are)";

/** `drain`: the runner takes no new workspace; what runs on it keeps running. Survives server restarts. */
export const drain: Command = {
  name: "drain",
  usage: USAGE,
  summary: "stop new placements on a runner (live sessions stay)",
  examples: ["agent-sessions drain gpu-1"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [name = ""] = positionals(parsed.positionals, ["RUNNER"], USAGE);
    const ctx = contextFrom(parsed.values);
    const runner = await ctx.client.drainRunner(name);
    if (ctx.json) ctx.out(formatData(runner, "json"));
    else {
      ctx.out(runnerTable([runner]));
      ctx.note(
        `runner/${runner.runner_name} drained: ${runner.live_sessions} live session(s) stay on it; undo with \`agent-sessions undrain ${runner.runner_name}\``,
      );
    }
    return 0;
  },
};
