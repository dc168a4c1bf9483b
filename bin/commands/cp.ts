import { createReadStream, createWriteStream, statSync } from "node:fs";
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { UsageError, contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";

const USAGE =
  "cp SRC DST [-n NAMESPACE] [--archive]   (one side SESSION:PATH in its /workspace, the other a local file or -)";

/** `SESSION:PATH` (a session name is a DNS label: no `/` before the colon), else a local path. */
function remote(arg: string): { session: string; path: string } | undefined {
  const m = /^([a-z0-9][-a-z0-9]*):(.*)$/.exec(arg);
  return m ? { session: m[1] as string, path: m[2] as string } : undefined;
}

/**
 * `cp`: files in and out of a HarnessSession's workspace through the files API (never an exec).
 * `cp ./a.txt chat:src/a.txt` uploads, `cp chat:src/a.txt ./a.txt` downloads (`-` is stdout or
 * stdin); `--archive` downloads a directory as a tar.
 */
export const cp: Command = {
  name: "cp",
  usage: USAGE,
  summary: "copy a file into or out of a session's /workspace",
  flags: [["--archive", "copy a directory out as a tar (SESSION:DIR to FILE)"]],
  examples: [
    "agent-sessions cp ./a.txt coding:src/a.txt   # into the session's /workspace",
    "agent-sessions cp coding:src/a.txt -         # to stdout",
    "agent-sessions cp --archive coding:src ./src.tar",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { archive: { type: "boolean", default: false } });
    const [src = "", dst = ""] = positionals(parsed.positionals, ["SRC", "DST"], USAGE);
    const ctx = contextFrom(parsed.values);
    const from = remote(src);
    const to = remote(dst);
    if ((from === undefined) === (to === undefined))
      throw new UsageError(`exactly one of SRC and DST is SESSION:PATH\nusage: agent-sessions ${USAGE}`);
    if (from) {
      const body = await ctx.client.downloadWorkspace(
        ctx.namespace,
        from.session,
        from.path,
        parsed.values.archive ? "archive" : "file",
      );
      const sink = dst === "-" ? process.stdout : createWriteStream(dst);
      await pipeline(Readable.fromWeb(body as import("node:stream/web").ReadableStream), sink as Writable);
      if (dst !== "-") ctx.note(`${src} → ${dst}`);
      return 0;
    }
    if (!to) return 2;
    if (parsed.values.archive) throw new UsageError("--archive is for downloads");
    if (src !== "-" && statSync(src, { throwIfNoEntry: false })?.isFile() !== true)
      throw new UsageError(`${src} is not a file`);
    const source = src === "-" ? process.stdin : createReadStream(src);
    const written = await ctx.client.uploadWorkspaceFile(
      ctx.namespace,
      to.session,
      to.path,
      Readable.toWeb(source) as unknown as ReadableStream<Uint8Array>,
    );
    if (ctx.json) ctx.out(JSON.stringify(written));
    else ctx.note(`${src} → ${dst} (${written.size} bytes)`);
    return 0;
  },
};
