/**
 * `agent-sessions`: the server and runner (`serve`, `runner`) and a client of the HTTP API for
 * people and scripts. One command a file under bin/commands/.
 *
 * Exit codes: 0 ok, 1 server-side failure, 2 usage error (flags, input), 3 not found,
 * 4 precondition or conflict.
 */
import { ExitCode, report } from "./cli-context.ts";
import type { Command } from "./command.ts";
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
import { top } from "./commands/top.ts";
import { undrain } from "./commands/undrain.ts";
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
];

const GLOBAL_HELP = `global flags:
  --server URL      the server (default $AGENT_SESSIONS_SERVER_URL, else http://127.0.0.1:8787)
  --token TOKEN     the admin token or a scoped API token (default $AGENT_SESSIONS_TOKEN, else <data-dir>/admin-token)
  --data-dir DIR    the server's data directory (default ./.data)
  -n, --namespace   namespace of resources (default "default")
  -q, --quiet       no progress or confirmations
  --json            machine-readable output (errors as JSON on stderr)
exit codes: 0 ok, 1 server-side failure, 2 usage error, 3 not found, 4 precondition or conflict`;

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `usage: agent-sessions COMMAND [ARGS] [FLAGS]   (agent-sessions COMMAND --help for its flags)

commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

${GLOBAL_HELP}
`;
}

const [name, ...rest] = process.argv.slice(2);
const wantsJson = rest.includes("--json");
let exitCode: number = ExitCode.ok;
if (name === undefined || name === "help" || name === "--help" || name === "-h") process.stdout.write(help());
else {
  const command = COMMANDS.find((c) => c.name === name || c.aliases?.includes(name));
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
