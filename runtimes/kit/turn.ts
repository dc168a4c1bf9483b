/**
 * One turn of a runtime's agent: a prompt in; text deltas and tool events while it runs; an outcome
 * at the end. Each runtime maps its agent's own protocol onto it (runtimes/pi/prompt-run.ts,
 * runtimes/hermes/prompt-run.ts, runtimes/compass/session.ts); the adapter entry
 * (runtimes/kit/adapter-entry.ts) and the agent's command loop (runtimes/kit/command-loop.ts)
 * drive it, so every runtime answers the runner and the server the same way.
 */
import type { Usage } from "../../contracts/adapter.ts";

export type ToolEvent = { phase: "start" | "end"; callId: string; name: string; isError?: boolean };

export type TurnOptions = {
  /** Aborts on cancel, timeout or a client that went away. */
  signal?: AbortSignal;
  onDelta?: (text: string) => void;
  onTool?: (event: ToolEvent) => void;
};

export type TurnOutcome =
  | { outcome: "succeeded"; text: string; usage: Usage }
  | { outcome: "failed"; error: string; text: string }
  | { outcome: "cancelled"; text: string };

/** Runs one turn; callers run one at a time (the kit queues them). */
export type RunTurn = (input: string, options: TurnOptions) => Promise<TurnOutcome>;

/** What a turn fails with when the Agent names no model endpoint. */
export const NO_MODEL = "no model endpoint configured (the Agent names none)";

/** `run`, or a failed turn when there is no model to run it with (the agent itself still starts). */
export function requireModel(model: unknown, run: RunTurn): RunTurn {
  return model ? run : async () => ({ outcome: "failed", error: NO_MODEL, text: "" });
}

/** Token counts of one assistant message as pi and the Oh My Pi SDK report them. */
export type MessageUsage = { input?: number; output?: number } | undefined;

/**
 * A turn's usage summed over its assistant messages: every one reported some, or it is
 * unavailable (an agent that reports 0 tokens got none from the model: never a real zero).
 */
export function summedUsage(usages: MessageUsage[]): Usage {
  if (usages.length === 0) return "unavailable";
  let input = 0;
  let output = 0;
  for (const u of usages) {
    const i = u?.input ?? 0;
    const o = u?.output ?? 0;
    if (!Number.isInteger(i) || !Number.isInteger(o) || i + o <= 0) return "unavailable";
    input += i;
    output += o;
  }
  return { input_tokens: input, output_tokens: output };
}
