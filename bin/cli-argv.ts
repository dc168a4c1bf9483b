/**
 * Where the command is on an `agent-sessions` line: global flags may come before it
 * (`agent-sessions --token T -n dev get hs`), so the command is the first word that is neither a
 * flag nor the value of a global flag that takes one. The rest keeps its order (commands parse
 * the global flags among their own: bin/command.ts).
 */

/** Global flags that take a value (`--server URL` or `--server=URL`). */
const VALUED = new Set(["--server", "--token", "--data-dir", "--namespace", "-n"]);

export type CliArgv = {
  /** The command's name, undefined when the line has none. */
  command: string | undefined;
  /** Everything else, in order, the command's name taken out. */
  rest: string[];
  /** `-h`/`--help` anywhere before a `--`. */
  help: boolean;
};

export function argvOf(argv: readonly string[]): CliArgv {
  let index = -1;
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i] ?? "";
    if (word === "--") break;
    if (VALUED.has(word)) {
      i++; // its value
      continue;
    }
    if (word.startsWith("-") && word !== "-") continue;
    index = i;
    break;
  }
  const dashDash = argv.indexOf("--");
  const flags = dashDash < 0 ? argv : argv.slice(0, dashDash);
  const help = flags.includes("--help") || flags.includes("-h");
  if (index < 0) return { command: undefined, rest: [...argv], help };
  return { command: argv[index], rest: [...argv.slice(0, index), ...argv.slice(index + 1)], help };
}
