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

const [{ startTurnAdapter }, { requireModel }, { piAgentSettings, startPi }, { runPrompt }] =
  await Promise.all([
    import("../kit/adapter-entry.ts"),
    import("../kit/turn.ts"),
    import("./pi-agent.ts"),
    import("./prompt-run.ts"),
  ]);

/** The session the adapter keeps on the volume (the exec'd agent, runtimes/pi/agent.ts, has its own). */
const SESSION_ID = "harness";

const settings = piAgentSettings();
const pi = startPi(settings, SESSION_ID);
startTurnAdapter({
  runtime: "pi",
  run: requireModel(settings.model, async (input, options) => runPrompt(await pi, input, options)),
  providerKey: process.env[settings.apiKeyEnv],
  agent: pi,
});
