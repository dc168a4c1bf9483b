import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { formatData } from "../render.ts";
import { runnerTable } from "./runners.ts";

const USAGE = "undrain RUNNER   (the runner takes new placements again)";

/** `undrain`: lifts `drain`; sessions waiting for a matching runner may be placed on it now. */
export const undrain: Command = {
  name: "undrain",
  usage: USAGE,
  summary: "let a drained runner take new placements again",
  examples: ["agent-sessions undrain gpu-1"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [name = ""] = positionals(parsed.positionals, ["RUNNER"], USAGE);
    const ctx = contextFrom(parsed.values);
    const runner = await ctx.client.undrainRunner(name);
    if (ctx.json) ctx.out(formatData(runner, "json"));
    else {
      ctx.out(runnerTable([runner]));
      ctx.note(`runner/${runner.runner_name} takes new placements again`);
    }
    return 0;
  },
};
