/**
 * The `hermes` runtime's v1alpha2 adapter: the session container's main process. It starts one
 * long-lived `hermes acp` for the session (runtimes/hermes/hermes-agent.ts) and answers each
 * request with one `session/prompt`, in arrival order (a Hermes session runs one turn at a time):
 * text deltas and tool events stream when the runtime declares streaming, cancel is
 * `session/cancel`, usage comes from the prompt result. The conversation is Hermes' state.db on
 * the volume, loaded again (`session/load`) when a stopped session resumes. If Hermes exits, the
 * adapter exits with it: the workload is gone (AdapterExited), never a silent fresh agent.
 */
import { adapterEnv, startAdapterServer } from "../kit/adapter-server.ts";
import { redactor } from "../kit/redact.ts";
import { hermesAgentSettings, startHermes } from "./hermes-agent.ts";
import { runPrompt, type ToolEvent } from "./prompt-run.ts";

/** The ACP session the adapter keeps on the volume (the exec'd agent, runtimes/hermes/agent.ts, has its own). */
const USE = "harness";

const adapter = adapterEnv();
const settings = hermesAgentSettings();
const redact = redactor([process.env[settings.apiKeyEnv], adapter.token]);
const hermes = await startHermes(settings, USE);
let stopping = false;
void hermes.acp.exited.then((code) => {
  if (stopping) return;
  process.stderr.write(`${JSON.stringify({ level: "error", msg: "hermes exited", code })}\n`);
  process.exit(1);
});

/** Requests wait for the one before them: a Hermes session runs one turn at a time. */
let queue: Promise<unknown> = Promise.resolve();

startAdapterServer({
  ...adapter,
  ready: () => hermes.acp.running,
  async handle(input, { signal, onDelta, onTool }) {
    if (!settings.model) throw new Error("no model endpoint configured (the Agent names none)");
    const turn = queue.then(async () => {
      if (signal.aborted) throw signal.reason;
      return runPrompt(hermes.acp, hermes.sessionId, input, {
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
  },
  shutdown: async () => {
    stopping = true;
    await hermes.acp.stop();
  },
});
