import { createWriteStream } from "node:fs";
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";

const USAGE = "export SNAPSHOT FILE [-n NAMESPACE]   (a gzip tar with its manifest; FILE - is stdout)";

/** `export`: a SessionSnapshot's archive (`GET …/sessionsnapshots/{name}/archive`) to a file. */
export const exportSnapshot: Command = {
  name: "export",
  usage: USAGE,
  summary: "write a snapshot's archive to a file, for another installation or engine",
  examples: [
    "agent-sessions export before-refactor ./snap.tgz",
    "agent-sessions export before-refactor - | ssh other agent-sessions import before-refactor -",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [snapshot = "", file = ""] = positionals(parsed.positionals, ["SNAPSHOT", "FILE"], USAGE);
    const ctx = contextFrom(parsed.values);
    const body = await ctx.client.exportSnapshot(ctx.namespace, snapshot);
    // 0600: the archive holds the agent's conversation and everything in its workspace.
    const sink = file === "-" ? process.stdout : createWriteStream(file, { mode: 0o600 });
    await pipeline(Readable.fromWeb(body as import("node:stream/web").ReadableStream), sink as Writable);
    if (file !== "-") ctx.note(`sessionsnapshot/${snapshot} → ${file}`);
    return 0;
  },
};
