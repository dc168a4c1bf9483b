/**
 * `agent-sessions`: the server and runner (`serve`, `runner`) and a client of the HTTP API for
 * people and scripts. One command a file under bin/commands/.
 *
 * Global flags may come before or after the command (`agent-sessions --token T get hs` and
 * `agent-sessions get hs --token T` are the same). Exit codes: bin/cli-context.ts ExitCode.
 */
import { argvOf } from "./cli-argv.ts";
import { EXIT_CODES_HELP, ExitCode, report } from "./cli-context.ts";
import { type Command, commandHelp, flagLines, GLOBAL_FLAGS_HELP } from "./command.ts";
import { apply } from "./commands/apply.ts";
import { cp } from "./commands/cp.ts";
import { create } from "./commands/create.ts";
import { del } from "./commands/delete.ts";
import { diff } from "./commands/diff.ts";
import { drain } from "./commands/drain.ts";
import { describe } from "./commands/describe.ts";
import { events } from "./commands/events.ts";
import { exportSnapshot } from "./commands/export.ts";
import { fork } from "./commands/fork.ts";
import { get } from "./commands/get.ts";
import { importSnapshot } from "./commands/import.ts";
import { pause } from "./commands/pause.ts";
import { policy } from "./commands/policy.ts";
import { restore } from "./commands/restore.ts";
import { resume } from "./commands/resume.ts";
import { runner } from "./commands/runner.ts";
import { runners } from "./commands/runners.ts";
import { send } from "./commands/send.ts";
import { serve } from "./commands/serve.ts";
import { snapshot } from "./commands/snapshot.ts";
import { snapshots } from "./commands/snapshots.ts";
import { stop } from "./commands/stop.ts";
import { token } from "./commands/token.ts";
import { logs } from "./commands/logs.ts";
import { top } from "./commands/top.ts";
import { undrain } from "./commands/undrain.ts";
import { version } from "./commands/version.ts";
import { wake } from "./commands/wake.ts";
import { webhook } from "./commands/webhook.ts";
import { portToken } from "./commands/port-token.ts";

const COMMANDS: readonly Command[] = [
  serve,
  runner,
  apply,
  create,
  get,
  describe,
  stop,
  resume,
  pause,
  wake,
  portToken,
  del,
  send,
  logs,
  cp,
  diff,
  top,
  snapshot,
  snapshots,
  fork,
  restore,
  exportSnapshot,
  importSnapshot,
  events,
  policy,
  runners,
  drain,
  undrain,
  token,
  webhook,
  version,
];

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `usage: agent-sessions COMMAND [ARGS] [FLAGS]   (agent-sessions help COMMAND, or COMMAND --help, for its flags and examples)

commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

global flags (anywhere on the line):
${flagLines(GLOBAL_FLAGS_HELP)}

${EXIT_CODES_HELP}
`;
}

const find = (name: string) => COMMANDS.find((c) => c.name === name || c.aliases?.includes(name));
const { command: name, rest, help: wantsHelp } = argvOf(process.argv.slice(2));
const wantsJson = rest.includes("--json");
let exitCode: number = ExitCode.ok;
if (name === undefined || (name === "help" && rest.length === 0)) {
  if (name === undefined && !wantsHelp && rest.length > 0) {
    process.stderr.write(`agent-sessions: no command given\n${help()}`);
    exitCode = ExitCode.usage;
  } else process.stdout.write(help());
} else if (name === "help" || wantsHelp) {
  // `help COMMAND` or `COMMAND --help`: the command's whole help.
  const topic = name === "help" ? rest.find((a) => !a.startsWith("-")) : name;
  const command = topic === undefined ? undefined : find(topic);
  if (command) process.stdout.write(commandHelp(command, EXIT_CODES_HELP));
  else {
    process.stderr.write(`agent-sessions: unknown command ${topic}\n${help()}`);
    exitCode = ExitCode.usage;
  }
} else {
  const command = find(name);
  if (!command) {
    process.stderr.write(`agent-sessions: unknown command ${name}\n${help()}`);
    exitCode = ExitCode.usage;
  } else {
    try {
      exitCode = (await command.run(rest)) ?? ExitCode.ok;
    } catch (error) {
      exitCode = report(error, wantsJson);
    }
  }
}
process.exitCode = exitCode;
