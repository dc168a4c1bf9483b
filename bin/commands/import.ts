import { createReadStream, statSync } from "node:fs";
import { Readable } from "node:stream";
import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { bytes } from "../render.ts";

const USAGE =
  "import SNAPSHOT FILE [-n NAMESPACE] [--engine docker|kubernetes]   (an exported archive; FILE - is stdin)";

/**
 * `import`: an exported snapshot archive as a SessionSnapshot of the namespace
 * (`PUT …/sessionsnapshots/{name}/archive`), held by a runner of `--engine` when given.
 */
export const importSnapshot: Command = {
  name: "import",
  usage: USAGE,
  summary: "make a snapshot from an exported archive (from any installation or engine)",
  flags: [["--engine docker|kubernetes", "which engine's runner stores it (default: any)"]],
  examples: ["agent-sessions import before-refactor ./snap.tgz"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { engine: { type: "string" } });
    const [snapshot = "", file = ""] = positionals(parsed.positionals, ["SNAPSHOT", "FILE"], USAGE);
    const engine = parsed.values.engine;
    if (engine !== undefined && engine !== "docker" && engine !== "kubernetes")
      throw new UsageError(`--engine must be docker or kubernetes, got ${engine}`);
    if (file !== "-" && statSync(file, { throwIfNoEntry: false })?.isFile() !== true)
      throw new UsageError(`${file} is not a file`);
    const ctx = contextFrom(parsed.values);
    const source = file === "-" ? process.stdin : createReadStream(file);
    const made = await ctx.client.importSnapshot(
      ctx.namespace,
      snapshot,
      Readable.toWeb(source) as unknown as ReadableStream<Uint8Array>,
      engine ? { engine } : {},
    );
    if (ctx.json) ctx.out(JSON.stringify(made));
    else if (!ctx.quiet)
      ctx.out(
        `sessionsnapshot/${snapshot} imported onto runner ${made.status.runner ?? "?"} (${made.status.engine ?? "?"}, ${bytes(made.status.sizeBytes ?? 0)})`,
      );
    return 0;
  },
};
