/**
 * The `hermes` runtime's v1alpha2 adapter: the session container's main process. It starts one
 * long-lived `hermes acp` for the session (runtimes/hermes/hermes-agent.ts) and answers each
 * request with one `session/prompt` through the kit's adapter entry (runtimes/kit/adapter-entry.ts):
 * cancel is `session/cancel`, usage comes from the prompt result. The conversation is Hermes'
 * state.db on the volume, loaded again (`session/load`) when a stopped session resumes.
 */
import { startTurnAdapter } from "../kit/adapter-entry.ts";
import { requireModel } from "../kit/turn.ts";
import { hermesAgentSettings, startHermes } from "./hermes-agent.ts";
import { runPrompt } from "./prompt-run.ts";
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";

/** The ACP session the adapter keeps on the volume (the exec'd agent, runtimes/hermes/agent.ts, has its own). */
const USE = "harness";

// Before anything else: from here on the token is in this process's memory only.
adapterTokenOutOfEnvironment();

const settings = hermesAgentSettings();
const hermes = await startHermes(settings, USE);
startTurnAdapter({
  runtime: "hermes",
  run: requireModel(settings.model, (input, options) =>
    runPrompt(hermes.acp, hermes.sessionId, input, options),
  ),
  providerKey: process.env[settings.apiKeyEnv],
  agent: hermes.acp,
});
