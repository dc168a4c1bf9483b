/**
 * One prompt through `hermes acp` (ACP `session/prompt`, agentclientprotocol.com/protocol/prompt-turn):
 * `session/update` notifications stream the answer (`agent_message_chunk`) and tool calls
 * (`tool_call`, `tool_call_update` with status completed|failed); the prompt's result ends the
 * turn with a `stopReason` and the turn's `usage` (inputTokens, outputTokens, …). A failed model
 * call is marked in the result's `_meta.agentSessions` by runtimes/hermes/hermes_acp.py. Hermes
 * reports 0 tokens when the model sent no usage: that is "unavailable", never a real zero.
 * Cancelling sends `session/cancel`; the turn then ends with stopReason `cancelled`.
 */
import type { Usage } from "../../contracts/adapter.ts";
import type { TurnOptions, TurnOutcome } from "../kit/turn.ts";
import type { AcpClient, AcpNotification } from "./acp-client.ts";

export type PromptRunOptions = TurnOptions & {
  /** After `session/cancel`, how long to wait for the turn to end before giving up. @default 10000 */
  cancelGraceMs?: number;
};

type PromptResult = {
  stopReason?: string;
  usage?: { inputTokens?: number; outputTokens?: number } | null;
  _meta?: { agentSessions?: { failed?: boolean; error?: string } } | null;
};

type SessionUpdate = {
  sessionUpdate?: string;
  content?: { type?: string; text?: string };
  toolCallId?: string;
  title?: string;
  status?: string;
  _meta?: { agentSessions?: { tool?: string } } | null;
};

export async function runPrompt(
  acp: AcpClient,
  sessionId: string,
  message: string,
  options: PromptRunOptions = {},
): Promise<TurnOutcome> {
  let text = "";
  /** Tool calls started and not ended, by id → name. */
  const open = new Map<string, string>();
  const endTool = (callId: string, isError?: boolean) => {
    const name = open.get(callId);
    if (name === undefined) return;
    open.delete(callId);
    options.onTool?.({ phase: "end", callId, name, ...(isError !== undefined ? { isError } : {}) });
  };
  const unsubscribe = acp.subscribe((n: AcpNotification) => {
    if (n.method !== "session/update" || n.params.sessionId !== sessionId) return;
    const update = n.params.update as SessionUpdate | undefined;
    switch (update?.sessionUpdate) {
      case "agent_message_chunk": {
        let delta = update.content?.type === "text" ? (update.content.text ?? "") : "";
        // Hermes opens the text after a tool call with a blank line even when no text came before.
        if (!text) delta = delta.trimStart();
        if (!delta) break;
        text += delta;
        options.onDelta?.(delta);
        break;
      }
      case "tool_call": {
        const callId = String(update.toolCallId ?? "");
        if (!callId || open.has(callId)) break;
        const name =
          update._meta?.agentSessions?.tool ?? String(update.title ?? "tool").split(":")[0] ?? "tool";
        open.set(callId, name);
        options.onTool?.({ phase: "start", callId, name });
        if (update.status === "completed" || update.status === "failed")
          endTool(callId, update.status === "failed");
        break;
      }
      case "tool_call_update":
        if (update.status === "completed" || update.status === "failed")
          endTool(String(update.toolCallId ?? ""), update.status === "failed");
        break;
    }
  });
  let graceTimer: NodeJS.Timeout | undefined;
  let giveUp!: () => void;
  const gaveUp = new Promise<"gave-up">((resolve) => {
    giveUp = () => resolve("gave-up");
  });
  const onAbort = () => {
    acp.notify("session/cancel", { sessionId });
    // An agent that never ends its turn after `session/cancel` must not hold the request forever.
    graceTimer = setTimeout(giveUp, options.cancelGraceMs ?? 10_000);
  };
  try {
    if (options.signal?.aborted) return { outcome: "cancelled", text };
    options.signal?.addEventListener("abort", onAbort, { once: true });
    const answer = await Promise.race([
      acp.request("session/prompt", { sessionId, prompt: [{ type: "text", text: message }] }),
      gaveUp,
    ]);
    // A tool the agent started and never reported ended is over once its turn is.
    for (const callId of [...open.keys()]) endTool(callId);
    if (answer === "gave-up") return { outcome: "cancelled", text };
    if (!answer.ok) {
      if (!acp.running)
        return { outcome: "failed", error: "the hermes agent exited during the request", text };
      return { outcome: "failed", error: `hermes refused the prompt: ${answer.error.message}`, text };
    }
    const result = (answer.result ?? {}) as PromptResult;
    if (options.signal?.aborted || result.stopReason === "cancelled") return { outcome: "cancelled", text };
    const failure = result._meta?.agentSessions;
    if (failure?.failed) return { outcome: "failed", error: failure.error ?? "the model call failed", text };
    if (result.stopReason !== "end_turn")
      return { outcome: "failed", error: `hermes ended the turn: ${String(result.stopReason)}`, text };
    return { outcome: "succeeded", text, usage: usageOf(result.usage) };
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
    clearTimeout(graceTimer);
    unsubscribe();
  }
}

/** The turn's usage as hermes reported it, or unavailable when the model reported none. */
export function usageOf(usage: PromptResult["usage"]): Usage {
  const input = usage?.inputTokens;
  const output = usage?.outputTokens;
  if (!Number.isInteger(input) || !Number.isInteger(output)) return "unavailable";
  if ((input as number) < 0 || (output as number) < 0 || (input as number) + (output as number) <= 0)
    return "unavailable";
  return { input_tokens: input as number, output_tokens: output as number };
}
