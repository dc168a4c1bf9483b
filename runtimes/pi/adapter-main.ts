/**
 * The `pi` runtime's v1alpha2 adapter: the session container's main process. It starts one
 * long-lived `pi --mode rpc` for the session (runtimes/pi/pi-agent.ts) and answers each request
 * with one prompt to it through the kit's adapter entry (runtimes/kit/adapter-entry.ts): cancel is
 * pi's `abort`, usage comes from the assistant messages' `message_end`. The conversation is pi's
 * session file on the volume, so a stopped and resumed session goes on where it was.
 *
 * The adapter listens while pi loads (a request waits for it; a pi that does not start fails the
 * requests and ends the adapter with exit code 1), so a resumed workload's agent, exec'd by the
 * runner once `/readyz` answers, loads its own pi alongside.
 */
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";

// Before anything else, and before the rest of the adapter is loaded: the token's handover
// re-executes this process, which would load every module twice.
adapterTokenOutOfEnvironment();

/** The session the adapter keeps on the volume (the exec'd agent, runtimes/pi/agent.ts, has its own). */
const SESSION_ID = "harness";

// pi first: its load is the longest part of a resume; the adapter's own code loads alongside.
const { piAgentSettings, startPi } = await import("./pi-agent.ts");
const settings = piAgentSettings();
const pi = startPi(settings, SESSION_ID);
pi.catch(() => undefined); // handled by the adapter entry below (a failed start fails requests, exit 1)

const [{ startTurnAdapter }, { requireModel }, { runPrompt }] = await Promise.all([
  import("../kit/adapter-entry.ts"),
  import("../kit/turn.ts"),
  import("./prompt-run.ts"),
]);
startTurnAdapter({
  runtime: "pi",
  run: requireModel(settings.model, async (input, options) => runPrompt(await pi, input, options)),
  providerKey: process.env[settings.apiKeyEnv],
  agent: pi,
});
