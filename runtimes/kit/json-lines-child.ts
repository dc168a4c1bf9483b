/**
 * An agent as a child process speaking one JSON object a line on its stdin and stdout: pi's RPC
 * mode (runtimes/pi/rpc-client.ts) and ACP (runtimes/hermes/acp-client.ts) both sit on it. Lines
 * are split on LF only: JSON strings may hold U+2028/U+2029, which Node's readline would split on.
 * Stdout is protocol only; the child's diagnostics go to stderr, passed through to ours.
 */
import { type ChildProcess, spawn } from "node:child_process";

/** What the kit needs of the agent process a runtime fronts: whether it runs, its end, stopping it. */
export type AgentProcess = {
  readonly running: boolean;
  /** Resolves with the exit code (null when killed by a signal or never started). */
  readonly exited: Promise<number | null>;
  stop(): Promise<void>;
};

export type JsonLinesChildOptions = {
  /** argv: the executable, then its arguments. */
  command: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** How diagnostics name the child ("pi", "the ACP agent"). */
  label: string;
  /** Each line that parsed as JSON. */
  onRecord: (record: unknown) => void;
  /** Once, when the child has exited (or could not start), before `exited` resolves. */
  onExit?: () => void;
  /** Where the child's stderr goes. @default our stderr */
  stderr?: (chunk: Buffer) => void;
};

export class JsonLinesChild implements AgentProcess {
  readonly #child: ChildProcess;
  readonly #label: string;
  #exitCode: number | null | undefined;
  readonly exited: Promise<number | null>;

  constructor(options: JsonLinesChildOptions) {
    const [file, ...args] = options.command;
    if (!file) throw new Error(`${options.label}: empty command`);
    this.#label = options.label;
    this.#child = spawn(file, args, { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => {
      const done = (code: number | null) => {
        if (this.#exitCode !== undefined) return;
        this.#exitCode = code;
        options.onExit?.();
        resolve(code);
      };
      this.#child.once("exit", (code) => done(code));
      this.#child.once("error", () => done(null));
    });
    const stderr = options.stderr ?? ((chunk: Buffer) => process.stderr.write(chunk));
    this.#child.stderr?.on("data", stderr);
    let buffer = "";
    const decoder = new TextDecoder();
    this.#child.stdout?.on("data", (chunk: Buffer) => {
      buffer += decoder.decode(chunk, { stream: true });
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        const line = buffer.slice(0, i).replace(/\r$/, "");
        buffer = buffer.slice(i + 1);
        if (line.trim()) this.#receive(line, options.onRecord);
      }
    });
    // A closed pipe after the child exited is reported through `exited`, not as a crash of ours.
    this.#child.stdin?.on("error", () => undefined);
  }

  get running(): boolean {
    return this.#exitCode === undefined;
  }

  #receive(line: string, onRecord: (record: unknown) => void): void {
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      process.stderr.write(`${this.#label} wrote a line that is not JSON (${line.length} bytes); ignored\n`);
      return;
    }
    onRecord(record);
  }

  /** Writes one record as a line, while the child runs. */
  send(record: object): void {
    if (this.running) this.#child.stdin?.write(`${JSON.stringify(record)}\n`);
  }

  /**
   * Orderly shutdown: closing stdin asks the child to finish and exit (pi's docs/rpc.md
   * "Shutdown"; an ACP stdio server ends with its input); SIGTERM after `graceMs`, SIGKILL after
   * twice that.
   */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.running) return;
    this.#child.stdin?.end();
    const term = setTimeout(() => this.#child.kill("SIGTERM"), graceMs);
    const kill = setTimeout(() => this.#child.kill("SIGKILL"), graceMs * 2);
    await this.exited;
    clearTimeout(term);
    clearTimeout(kill);
  }
}
