/**
 * One prompt through pi's RPC mode, from `prompt` to `agent_settled` (pi's docs/json.md): the
 * text deltas of every assistant message as they stream, tool executions, and at the end the
 * whole answer with the usage summed over the run's assistant messages. pi reports 0 tokens when
 * the model sent no usage: that is "unavailable", never a real zero. Cancelling sends `abort`.
 */
import { type MessageUsage, summedUsage, type TurnOptions, type TurnOutcome } from "../kit/turn.ts";
import type { PiRecord, PiRpcClient } from "./rpc-client.ts";

export type PromptRunOptions = TurnOptions & {
  /** After `abort`, how long to wait for pi to settle before giving up. @default 10000 */
  abortGraceMs?: number;
};

type AssistantMessage = {
  role?: string;
  stopReason?: string;
  errorMessage?: string;
  usage?: MessageUsage;
};

/** Assistant messages of one run are separated by a blank line in the answer. */
const TURN_SEPARATOR = "\n\n";

export async function runPrompt(
  pi: PiRpcClient,
  message: string,
  options: PromptRunOptions = {},
): Promise<TurnOutcome> {
  let text = "";
  /** Text of the assistant message being streamed (a separator goes before a later one's first delta). */
  let messageHasText = false;
  const usages: MessageUsage[] = [];
  let lastError: string | undefined;
  let settle!: (aborted: boolean) => void;
  const settled = new Promise<boolean>((resolve) => {
    settle = resolve;
  });
  const unsubscribe = pi.subscribe((record: PiRecord) => {
    switch (record.type) {
      case "message_start":
        if ((record.message as AssistantMessage | undefined)?.role === "assistant") messageHasText = false;
        break;
      case "message_update": {
        const event = record.assistantMessageEvent as { type?: string; delta?: string } | undefined;
        if (event?.type !== "text_delta" || !event.delta) break;
        const delta = !messageHasText && text ? `${TURN_SEPARATOR}${event.delta}` : event.delta;
        messageHasText = true;
        text += delta;
        options.onDelta?.(delta);
        break;
      }
      case "message_end": {
        const done = record.message as AssistantMessage | undefined;
        if (done?.role !== "assistant") break;
        usages.push(done.usage);
        lastError = done.stopReason === "error" ? (done.errorMessage ?? "the model call failed") : undefined;
        break;
      }
      case "tool_execution_start":
      case "tool_execution_end":
        options.onTool?.({
          phase: record.type === "tool_execution_start" ? "start" : "end",
          callId: String(record.toolCallId ?? ""),
          name: String(record.toolName ?? ""),
          ...(record.type === "tool_execution_end" ? { isError: record.isError === true } : {}),
        });
        break;
      case "agent_settled":
        settle(record.aborted === true);
        break;
    }
  });
  let graceTimer: NodeJS.Timeout | undefined;
  const onAbort = () => {
    void pi.command("abort");
    // A pi that never settles after `abort` must not hold the request (or the next one) forever.
    graceTimer = setTimeout(() => settle(true), options.abortGraceMs ?? 10_000);
  };
  try {
    if (options.signal?.aborted) return { outcome: "cancelled", text };
    // Listening before the prompt goes out: a cancel that comes while pi's answer to `prompt` is
    // on its way (its first events can arrive with it) still sends `abort`, after the prompt.
    options.signal?.addEventListener("abort", onAbort, { once: true });
    const accepted = await pi.command("prompt", { message });
    if (!accepted.success)
      return { outcome: "failed", error: `pi refused the prompt: ${accepted.error}`, text };
    if ((accepted.data as { disposition?: string } | undefined)?.disposition === "handled")
      return { outcome: "succeeded", text, usage: "unavailable" };
    const exited = pi.exited.then(() => "exited" as const);
    const first = await Promise.race([settled, exited]);
    if (first === "exited")
      return { outcome: "failed", error: "the pi agent exited during the request", text };
    if (options.signal?.aborted || first) return { outcome: "cancelled", text };
    if (lastError !== undefined) return { outcome: "failed", error: lastError, text };
    return { outcome: "succeeded", text, usage: summedUsage(usages) };
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
    clearTimeout(graceTimer);
    unsubscribe();
  }
}
