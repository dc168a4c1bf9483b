/**
 * The seed-004 agent of a runtime (its `spec.agent.command`): started by the runner over a
 * long-lived exec stream inside the workload, it reads JSON commands on stdin and writes
 * compass.v1 frames on stdout, one turn of the runtime's agent per message.
 *
 * Commands, one JSON object a line: {"type":"message","text":"…"} runs a turn — `delta` frames as
 * text streams, `tool` frames as tools start and end, then a `message` frame with the answer and a
 * `result` frame with the outcome and usage (a failed turn: an `error` frame and a failed result);
 * {"type":"cancel"} aborts the turn running; {"type":"exit"} ends the agent cleanly once the
 * messages before it are answered. Messages run one after another.
 */
import type { AgentProcess } from "./json-lines-child.ts";
import { redactor } from "./redact.ts";
import type { RunTurn } from "./turn.ts";

export type CommandLoopOptions = {
  /** Named in the `agent started` log frame. */
  runtime: string;
  run: RunTurn;
  /** The provider key the session holds: redacted from every frame, like the adapter token. */
  providerKey: string | undefined;
  /**
   * The agent process behind `run`, or how to start it (resolving to nothing for an agent in this
   * process, as compass's SDK): then it starts with the first message
   * (the loop says `agent started` at once and the message waits for the start; a workload
   * resumed for its adapter's sake does not load a second agent meanwhile), and a start that
   * fails is an `error` frame, a failed result and exit code 1. Its exit while the loop runs is an
   * `error` frame (`<runtime> exited`) and exit code 1; it is stopped before the loop exits.
   * @default none
   */
  agent?: AgentProcess | (() => Promise<AgentProcess | undefined>);
  /**
   * Stdin closed: answer the messages already sent, then exit (true), or abort the turn running
   * and exit at once (false). @default false
   */
  finishOnStdinEnd?: boolean;
  /** @default process.stdin */
  input?: NodeJS.ReadableStream;
  /** One frame line. @default process.stdout.write */
  write?: (line: string) => void;
  /** @default process.exit */
  exit?: (code: number) => void;
  /** @default process.env (its ADAPTER_TOKEN is redacted) */
  env?: NodeJS.ProcessEnv;
};

export function runCommandLoop(options: CommandLoopOptions): void {
  const write = options.write ?? ((line: string) => process.stdout.write(line));
  const processExit = options.exit ?? ((code: number) => process.exit(code));
  const input = options.input ?? process.stdin;
  const redact = redactor([options.providerKey, (options.env ?? process.env).ADAPTER_TOKEN]);
  const emit = (type: string, payload: Record<string, unknown>): void =>
    write(`${JSON.stringify({ protocol: "compass.v1", type, ts: new Date().toISOString(), payload })}\n`);

  let exiting = false;
  /** The agent's start, once begun. */
  let agent: Promise<AgentProcess | undefined> | undefined;
  const startAgent = (): Promise<AgentProcess | undefined> | undefined => {
    if (agent || !options.agent) return agent;
    const given = options.agent;
    agent = typeof given === "function" ? given() : Promise.resolve(given);
    void agent.then(
      (started) =>
        started?.exited.then((code) => {
          if (exiting) return;
          emit("error", { message: `${options.runtime} exited`, code });
          processExit(1);
        }),
      () => undefined, // the message that started it reports it
    );
    return agent;
  };
  if (typeof options.agent !== "function") void startAgent();
  emit("log", { message: "agent started", runtime: options.runtime });

  let queue: Promise<unknown> = Promise.resolve();
  let current: AbortController | undefined;

  async function answer(text: string): Promise<void> {
    const controller = new AbortController();
    current = controller;
    try {
      try {
        await startAgent();
      } catch (error) {
        emit("error", { message: redact((error as Error).message) });
        emit("result", { outcome: "failed", usage: "unavailable" });
        await exit(1);
        return;
      }
      if (controller.signal.aborted) {
        emit("result", { outcome: "cancelled", usage: "unavailable" });
        return;
      }
      const outcome = await options.run(text, {
        signal: controller.signal,
        onDelta: (delta) => emit("delta", { text: redact(delta) }),
        onTool: (e) =>
          emit("tool", {
            phase: e.phase,
            call_id: e.callId,
            name: e.name,
            ...(e.isError !== undefined ? { is_error: e.isError } : {}),
          }),
      });
      if (outcome.outcome === "succeeded") {
        emit("message", { role: "assistant", text: redact(outcome.text) });
        emit("result", { outcome: "succeeded", usage: outcome.usage });
      } else if (outcome.outcome === "failed") {
        emit("error", { message: redact(outcome.error) });
        emit("result", { outcome: "failed", usage: "unavailable" });
      } else emit("result", { outcome: "cancelled", usage: "unavailable" });
    } finally {
      current = undefined;
    }
  }

  async function exit(code: number): Promise<void> {
    exiting = true;
    current?.abort();
    await (await agent?.catch(() => undefined))?.stop();
    processExit(code);
  }

  function handle(line: string): void {
    let command: { type?: string; text?: string };
    try {
      command = JSON.parse(line) as typeof command;
    } catch {
      emit("error", { message: "command is not JSON" });
      return;
    }
    switch (command.type) {
      case "message": {
        const text = command.text ?? "";
        if (!text) {
          emit("error", { message: "a message needs text" });
          return;
        }
        queue = queue
          .then(() => answer(text))
          .catch((error: Error) => emit("error", { message: redact(error.message) }));
        return;
      }
      case "cancel":
        current?.abort();
        return;
      case "exit":
        void queue.then(() => {
          emit("result", { outcome: "succeeded" });
          return exit(0);
        });
        return;
      default:
        emit("error", { message: `unknown command ${String(command.type)}` });
    }
  }

  // Records are split on LF only (JSON strings may hold U+2028/U+2029, which readline splits on).
  let buffer = "";
  input.setEncoding("utf8");
  input.on("data", (chunk: string) => {
    buffer += chunk;
    for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
      const line = buffer.slice(0, i).trim();
      buffer = buffer.slice(i + 1);
      if (line) handle(line);
    }
  });
  input.on("end", () => void (options.finishOnStdinEnd ? queue.then(() => exit(0)) : exit(0)));
  if (!options.input) process.on("SIGTERM", () => void exit(0));
}
