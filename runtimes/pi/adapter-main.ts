/**
 * The `pi` runtime's v1alpha2 adapter: the session container's main process. It starts one
 * long-lived `pi --mode rpc` for the session (runtimes/pi/pi-agent.ts) and answers each request
 * with one prompt to it through the kit's adapter entry (runtimes/kit/adapter-entry.ts): cancel is
 * pi's `abort`, usage comes from the assistant messages' `message_end`. The conversation is pi's
 * session file on the volume, so a stopped and resumed session goes on where it was.
 */
import { startTurnAdapter } from "../kit/adapter-entry.ts";
import { requireModel } from "../kit/turn.ts";
import { piAgentSettings, startPi } from "./pi-agent.ts";
import { runPrompt } from "./prompt-run.ts";
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";

/** The session the adapter keeps on the volume (the exec'd agent, runtimes/pi/agent.ts, has its own). */
const SESSION_ID = "harness";

// Before anything else: from here on the token is in this process's memory only.
adapterTokenOutOfEnvironment();

const settings = piAgentSettings();
const pi = await startPi(settings, SESSION_ID);
startTurnAdapter({
  runtime: "pi",
  run: requireModel(settings.model, (input, options) => runPrompt(pi, input, options)),
  providerKey: process.env[settings.apiKeyEnv],
  agent: pi,
});
