/**
 * A runtime's v1alpha2 adapter in a few lines: the session container's main process fronts the
 * runtime's agent with the shared adapter server (runtimes/kit/adapter-server.ts). Requests are
 * answered one turn each, in arrival order (an agent session runs one turn at a time); text
 * deltas and tool events stream when the runtime declares streaming; what leaves the adapter has
 * the session's secrets redacted. If the agent process exits, the adapter exits with it: the
 * workload is gone (AdapterExited), never a silent restart with a fresh agent.
 */
import type { Server } from "node:http";
import { type AdapterEnv, type AgentHandler, adapterEnv, startAdapterServer } from "./adapter-server.ts";
import type { AgentProcess } from "./json-lines-child.ts";
import { redactor } from "./redact.ts";
import type { RunTurn, ToolEvent } from "./turn.ts";

export type TurnAdapterOptions = {
  /** Named in the log line when the agent exits. */
  runtime: string;
  run: RunTurn;
  /** The provider key the session holds: redacted like the adapter token. */
  providerKey: string | undefined;
  /** The agent process behind `run`: ready while it runs, stopped on shutdown. @default none */
  agent?: AgentProcess;
  /** @default adapterEnv() */
  env?: AdapterEnv;
};

/** Answers each request with one turn, after the turns before it; secrets redacted from what leaves. */
export function turnHandler(run: RunTurn, redact: (text: string) => string): AgentHandler {
  /** Requests wait for the one before them. */
  let queue: Promise<unknown> = Promise.resolve();
  return async (input, { signal, onDelta, onTool }) => {
    const turn = queue.then(async () => {
      if (signal.aborted) throw signal.reason;
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
    const outcome = await turn;
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

export function startTurnAdapter(options: TurnAdapterOptions): Server {
  const env = options.env ?? adapterEnv();
  const agent = options.agent;
  let stopping = false;
  void agent?.exited.then((code) => {
    if (stopping) return;
    process.stderr.write(`${JSON.stringify({ level: "error", msg: `${options.runtime} exited`, code })}\n`);
    process.exit(1);
  });
  return startAdapterServer({
    ...env,
    handle: turnHandler(options.run, redactor([options.providerKey, env.token])),
    ...(agent
      ? {
          ready: () => agent.running,
          shutdown: async () => {
            stopping = true;
            await agent.stop();
          },
        }
      : {}),
  });
}
