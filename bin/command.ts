import { type ParseArgsOptionsConfig, parseArgs } from "node:util";
import { GLOBAL_OPTIONS, UsageError } from "./cli-context.ts";

/** One subcommand of `agent-sessions`: a file under bin/commands/. */
export type Command = {
  name: string;
  /** Other names it answers to. */
  aliases?: readonly string[];
  /** The usage line, after `agent-sessions `. */
  usage: string;
  summary: string;
  /** What `agent-sessions help COMMAND` says below the usage: a few lines of prose. */
  description?: string;
  /** Its own flags as `[flag, what it does]`, shown by `help COMMAND` (the global ones follow). */
  flags?: readonly (readonly [string, string])[];
  /** Command lines a user can copy, with a `# comment` saying what each does. */
  examples?: readonly string[];
  /** Resolves to the exit code (0 when undefined). */
  run(argv: string[]): Promise<number | undefined>;
};

/** The global flags every command takes, as `help` lists them. */
export const GLOBAL_FLAGS_HELP: readonly (readonly [string, string])[] = [
  ["--server URL", "the server (default $AGENT_SESSIONS_SERVER_URL, else http://127.0.0.1:8787)"],
  [
    "--token TOKEN",
    "the admin token or a scoped API token (default $AGENT_SESSIONS_TOKEN, else <data-dir>/admin-token)",
  ],
  ["--data-dir DIR", "the server's data directory (default $AGENT_SESSIONS_DATA_DIR, else ./.data)"],
  ["-n, --namespace NS", 'namespace of resources (default "default")'],
  ["-q, --quiet", "no progress or confirmations"],
  ["--json", "machine-readable output (errors as JSON on stderr)"],
  ["-h, --help", "this help"],
];

/** Columns of `[flag, text]` lines, the texts aligned. */
export function flagLines(flags: readonly (readonly [string, string])[]): string {
  const width = Math.max(...flags.map(([f]) => f.length));
  return flags.map(([f, text]) => `  ${f.padEnd(width)}  ${text}`).join("\n");
}

/** `agent-sessions help COMMAND` and `COMMAND --help`: usage, what it does, its flags, examples, global flags. */
export function commandHelp(command: Command, exitCodes: string): string {
  const parts = [`usage: agent-sessions ${command.usage}`, "", command.description ?? command.summary];
  if (command.aliases?.length) parts.push("", `aliases: ${command.aliases.join(", ")}`);
  if (command.flags?.length) parts.push("", "flags:", flagLines(command.flags));
  if (command.examples?.length) parts.push("", "examples:", command.examples.map((e) => `  ${e}`).join("\n"));
  parts.push("", "global flags (anywhere on the line):", flagLines(GLOBAL_FLAGS_HELP), "", exitCodes);
  return `${parts.join("\n")}\n`;
}

/**
 * Parses a command's arguments with the global flags merged in (they may come anywhere). Unknown
 * flags are usage errors. `--help` prints `usage` and exits 0 (bin/cli.ts answers `--help` with
 * the command's whole help before this runs).
 */
export function parseCommand<O extends ParseArgsOptionsConfig>(argv: string[], usage: string, options: O) {
  const parse = () =>
    parseArgs({
      args: argv,
      options: { ...GLOBAL_OPTIONS, ...options } as typeof GLOBAL_OPTIONS & O,
      allowPositionals: true,
      strict: true,
    });
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse();
  } catch (error) {
    throw new UsageError(`${(error as Error).message}\nusage: agent-sessions ${usage}`);
  }
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(`usage: agent-sessions ${usage}\n`);
    process.exit(0);
  }
  return parsed;
}

/** Exactly `count` positionals, named in the usage, or a usage error. */
export function positionals(
  given: string[],
  names: readonly string[],
  usage: string,
  optional = 0,
): string[] {
  const required = names.length - optional;
  if (given.length < required)
    throw new UsageError(
      `missing ${names.slice(given.length, required).join(" ")}\nusage: agent-sessions ${usage}`,
    );
  if (given.length > names.length)
    throw new UsageError(`unexpected argument ${given[names.length]}\nusage: agent-sessions ${usage}`);
  return given;
}
