/**
 * What both drivers share about the exec'd agent process: the wrapper that reports its PID, how
 * that PID is read back from stderr, and how a stop escalates from SIGTERM to SIGKILL.
 */

/** The marker the exec wrapper writes to stderr before it becomes the agent: the agent's PID. */
export const AGENT_PID_MARKER = "agent-sessions-agent-pid=";

/** How long a signalled agent (SIGTERM, then SIGKILL) has to end before the next step. */
export const AGENT_STOP_GRACE_MS = 5000;

/** How much stderr is searched for the PID line before giving up on it. */
const PID_SEARCH_BYTES = 4096;

/**
 * The agent's command wrapped so that the shell reports its PID (in the workload's PID namespace)
 * on stderr, makes itself the OOM killer's first choice, drops the adapter's token from the
 * environment, then becomes the agent: `exec "$@"` keeps the PID, so the process a stop signals is
 * the agent itself.
 */
export function agentExecCommand(command: string[]): string[] {
  // An exec starts with the workload's environment, the adapter's token in it: the agent is
  // executed without it, so no tool of the agent reads it in /proc/<pid>/environ (issue 35).
  // The agent is the OOM killer's first choice in its workload (oom_score_adj 1000, which any
  // process may raise for itself; exec keeps it): an agent that runs out of memory ends itself,
  // not the adapter beside it, whose end would take the workload down (and, under load, made the
  // kernel pick the adapter over a growing agent in CI).
  return [
    "/bin/sh",
    "-c",
    `echo "${AGENT_PID_MARKER}$$" >&2; echo 1000 2>/dev/null >/proc/self/oom_score_adj; unset ADAPTER_TOKEN; exec "$@"`,
    "agent",
    ...command,
  ];
}

/**
 * The command that sends `signal` (TERM, KILL) to the agent's PID inside the workload: through
 * the shell the wrapper needs anyway, whose `kill` is a builtin; an image need not ship a `kill`
 * binary (the compass image has none: an exec of `kill` failed and every stop waited out its grace).
 */
export function agentSignalCommand(signal: string, pid: string): string[] {
  return ["/bin/sh", "-c", 'kill -"$0" "$1"', signal, pid];
}

/**
 * Reads the wrapper's PID line from the agent's stderr (the rest of stderr is the agent's own
 * log). `pid` resolves with the PID, or undefined once `end()` is called without one.
 */
export class AgentPidReader {
  readonly pid: Promise<string | undefined>;
  #resolve!: (pid: string | undefined) => void;
  #text = "";
  #done = false;
  #value: string | undefined;

  constructor() {
    this.pid = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  /** The PID once seen. */
  get value(): string | undefined {
    return this.#value;
  }

  /** A chunk of the agent's stderr. */
  feed(chunk: string): void {
    if (this.#done) return;
    this.#text += chunk;
    const m = this.#text.match(new RegExp(`${AGENT_PID_MARKER}(\\d+)\\n`));
    if (m) {
      this.#value = m[1];
      this.#resolve(m[1]);
    }
    if (m || this.#text.length > PID_SEARCH_BYTES) {
      this.#done = true;
      this.#text = "";
    }
  }

  /** The agent ended: no PID any more. */
  end(): void {
    this.#done = true;
    this.#text = "";
    this.#resolve(undefined);
  }
}

/**
 * Sends SIGTERM, then SIGKILL, each followed by up to AGENT_STOP_GRACE_MS for the agent to end.
 * True once `ended` says it did; false when it outlived both.
 */
export async function signalUntilEnded(
  signal: (name: "TERM" | "KILL") => Promise<void>,
  ended: (withinMs: number) => Promise<boolean>,
): Promise<boolean> {
  for (const name of ["TERM", "KILL"] as const) {
    await signal(name);
    if (await ended(AGENT_STOP_GRACE_MS)) return true;
  }
  return false;
}
