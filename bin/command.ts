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
  /** Resolves to the exit code (0 when undefined). */
  run(argv: string[]): Promise<number | undefined>;
};

/**
 * Parses a command's arguments with the global flags merged in (they may come anywhere). Unknown
 * flags are usage errors. `--help` prints `usage` and exits 0.
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
