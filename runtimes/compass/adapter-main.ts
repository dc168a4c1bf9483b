/**
 * The `compass` runtime's v1alpha2 adapter: the session container's main process, run by Bun.
 * It fronts one compass conversation (session.ts, kept on the volume as `.compass/harness.json`)
 * with the shared adapter server (runtimes/kit/adapter-server.ts, plain node:http, which Bun
 * serves): requests answered in arrival order, text deltas streamed when the runtime declares
 * streaming, tool calls as `tool` events, cancel = the SDK's abort, usage from the assistant
 * messages, a failed outcome when the model call fails.
 */
import { adapterEnv, startAdapterServer } from "../kit/adapter-server.ts";
import { redactor } from "../kit/redact.ts";
import { makeUndumpable } from "./no-dump.ts";
import { CompassSession, type ToolEvent } from "./session.ts";
import { compassSettings } from "./settings.ts";

// PID 1's /proc files stay readable to its own uid unless COMPASS_UNDUMPABLE=true: the conformance
// suite reads /proc/1/cwd to see the workload's cwd, and an undumpable PID 1 refuses that. The
// price: a bash tool may read the key from /proc/1/environ (the seed-004 agent is undumpable).
if (process.env.COMPASS_UNDUMPABLE === "true") makeUndumpable();
const adapter = adapterEnv();
const settings = compassSettings();
const redact = redactor([settings.apiKey, adapter.token]);
const session = new CompassSession(settings, "harness");

/** Requests wait for the one before them: one conversation runs one prompt at a time. */
let queue: Promise<unknown> = Promise.resolve();

// The SDK (pi-utils' postmortem) exits 143 at once on SIGTERM; the adapter drains the requests
// in flight first and then exits 0 (runtimes/kit/adapter-server.ts): its handler is the only one.
process.removeAllListeners("SIGTERM");

startAdapterServer({
  ...adapter,
  async handle(input, { signal, onDelta, onTool }) {
    const turn = queue.then(async () => {
      if (signal.aborted) throw signal.reason;
      return session.run(input, {
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
});
