/**
 * A runtime's v1alpha2 adapter in a few lines: the session container's main process fronts the
 * runtime's agent with the shared adapter server (runtimes/kit/adapter-server.ts). Requests are
 * answered one turn each, in arrival order (an agent session runs one turn at a time); text
 * deltas and tool events stream when the runtime declares streaming; what leaves the adapter has
 * the session's secrets redacted. If the agent process exits, the adapter exits with it: the
 * workload is gone (AdapterExited), never a silent restart with a fresh agent.
 *
 * The agent may still be starting (`agent` a promise): the adapter listens and answers `/readyz`
 * meanwhile, and requests wait for the start; a start that fails fails them with its (redacted)
 * error and ends the adapter with exit code 1 (runtimes/kit/adapter-server.ts).
 */
import type { Server } from "node:http";
import { type AdapterEnv, type AgentHandler, adapterEnv, startAdapterServer } from "./adapter-server.ts";
import type { AgentProcess } from "./json-lines-child.ts";
import { redactor } from "./redact.ts";
import type { RunTurn, ToolEvent, TurnOutcome } from "./turn.ts";

export type TurnAdapterOptions = {
  /** Named in the log line when the agent exits. */
  runtime: string;
  run: RunTurn;
  /** The provider key the session holds: redacted like the adapter token. */
  providerKey: string | undefined;
  /**
   * The agent process behind `run`, or its start (resolving to it, or to nothing for an agent
   * that is no process of its own): requests wait for the start; ready while it runs, stopped on
   * shutdown. @default none
   */
  agent?: AgentProcess | Promise<AgentProcess | undefined>;
  /** @default adapterEnv() */
  env?: AdapterEnv;
  /** @default process.exit */
  exit?: (code: number) => void;
};

/**
 * Answers each request with one turn, after the turns before it and once the agent has started;
 * secrets redacted from what leaves.
 */
export function turnHandler(
  run: RunTurn,
  redact: (text: string) => string,
  started: Promise<unknown> = Promise.resolve(),
): AgentHandler {
  /** Requests wait for the one before them. */
  let queue: Promise<unknown> = Promise.resolve();
  return async (input, { signal, onDelta, onTool }) => {
    const turn = queue.then(async () => {
      await untilSettled(started, signal);
      if (signal.aborted) throw signal.reason;
      await started; // a failed start fails the turn with its error
      return run(input, {
        signal,
        ...(onDelta ? { onDelta: (text: string) => onDelta(redact(text)) } : {}),
        ...(onTool
          ? {
              onTool: (e: ToolEvent) =>
                onTool({
                  phase: e.phase,
                  call_id: e.callId,
                  name: e.name,
                  ...(e.isError !== undefined ? { is_error: e.isError } : {}),
                }),
            }
          : {}),
      });
    });
    queue = turn.catch(() => undefined);
    let outcome: TurnOutcome;
    try {
      outcome = await turn;
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      throw new Error(redact((error as Error).message ?? String(error)));
    }
    switch (outcome.outcome) {
      case "succeeded":
        return { text: redact(outcome.text), usage: outcome.usage };
      case "failed":
        throw new Error(redact(outcome.error));
      case "cancelled":
        throw signal.reason ?? new Error("cancelled");
      default: {
        const never: never = outcome;
        throw new Error(`unknown outcome ${JSON.stringify(never)}`);
      }
    }
  };
}

/** `promise` settled (either way), or `signal` aborted: a request cancelled while it waits goes at once. */
function untilSettled(promise: Promise<unknown>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      signal.removeEventListener("abort", done);
      resolve();
    };
    signal.addEventListener("abort", done, { once: true });
    promise.then(done, done);
  });
}

export function startTurnAdapter(options: TurnAdapterOptions): Server {
  const env = options.env ?? adapterEnv();
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const redact = redactor([options.providerKey, env.token]);
  const starting = Promise.resolve(options.agent).catch((error: unknown) => {
    throw new Error(redact(error instanceof Error ? error.message : String(error)));
  });
  /** The agent once started. */
  let agent: AgentProcess | undefined;
  let stopping = false;
  void starting.then(
    (started) => {
      agent = started;
      void started?.exited.then((code) => {
        if (stopping) return;
        process.stderr.write(
          `${JSON.stringify({ level: "error", msg: `${options.runtime} exited`, code })}\n`,
        );
        exit(1);
      });
    },
    () => undefined, // the server reports it and exits 1
  );
  return startAdapterServer({
    ...env,
    handle: turnHandler(options.run, redact, starting),
    ...(options.agent ? { starting } : {}),
    exit,
    ready: () => agent?.running ?? true,
    shutdown: async () => {
      stopping = true;
      await (await starting.catch(() => undefined))?.stop();
    },
  });
}
