/**
 * The `pi` runtime's v1alpha2 adapter: the session container's main process. It starts one
 * long-lived `pi --mode rpc` for the session (runtimes/pi/pi-agent.ts) and answers each request
 * with one prompt to it, in arrival order (pi runs one prompt at a time): text deltas stream when
 * the runtime declares streaming, cancel is pi's `abort`, usage comes from the assistant
 * messages' `message_end`. The conversation is pi's session file on the volume, so a stopped and
 * resumed session goes on where it was. If pi exits, the adapter exits with it: the workload is
 * gone (AdapterExited), never a silent restart with a fresh agent.
 */
import { adapterEnv, startAdapterServer } from "../kit/adapter-server.ts";
import { piAgentSettings, startPi } from "./pi-agent.ts";
import { runPrompt, type ToolEvent } from "./prompt-run.ts";
import { redactor } from "../kit/redact.ts";

/** The session the adapter keeps on the volume (the exec'd agent, runtimes/pi/agent.ts, has its own). */
const SESSION_ID = "harness";

const adapter = adapterEnv();
const settings = piAgentSettings();
const redact = redactor([process.env[settings.apiKeyEnv], adapter.token]);
const pi = await startPi(settings, SESSION_ID);
let stopping = false;
void pi.exited.then((code) => {
  if (stopping) return;
  process.stderr.write(`${JSON.stringify({ level: "error", msg: "pi exited", code })}\n`);
  process.exit(1);
});

/** Requests wait for the one before them: a pi session runs one prompt at a time. */
let queue: Promise<unknown> = Promise.resolve();

startAdapterServer({
  ...adapter,
  ready: () => pi.running,
  async handle(input, { signal, onDelta, onTool }) {
    if (!settings.model) throw new Error("no model endpoint configured (the Agent names none)");
    const turn = queue.then(async () => {
      if (signal.aborted) throw signal.reason;
      return runPrompt(pi, input, {
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
    await pi.stop();
  },
});
