/**
 * The `hermes` runtime's v1alpha2 adapter: the session container's main process. It starts one
 * long-lived `hermes acp` for the session (runtimes/hermes/hermes-agent.ts) and answers each
 * request with one `session/prompt` through the kit's adapter entry (runtimes/kit/adapter-entry.ts):
 * cancel is `session/cancel`, usage comes from the prompt result. The conversation is Hermes'
 * state.db on the volume, loaded again (`session/load`) when a stopped session resumes.
 *
 * The adapter listens while Hermes loads (a request waits for it; a Hermes that does not start
 * fails the requests and ends the adapter with exit code 1).
 */
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";

// Before anything else, and before the rest of the adapter is loaded: the token's handover
// re-executes this process, which would load every module twice.
adapterTokenOutOfEnvironment();

/** The ACP session the adapter keeps on the volume (the exec'd agent, runtimes/hermes/agent.ts, has its own). */
const USE = "harness";

// Hermes first: its load is the longest part of a resume; the adapter's own code loads alongside.
const { hermesAgentSettings, startHermes } = await import("./hermes-agent.ts");
const settings = hermesAgentSettings();
const hermes = startHermes(settings, USE);
hermes.catch(() => undefined); // handled by the adapter entry below (a failed start fails requests, exit 1)

const [{ startTurnAdapter }, { requireModel }, { runPrompt }] = await Promise.all([
  import("../kit/adapter-entry.ts"),
  import("../kit/turn.ts"),
  import("./prompt-run.ts"),
]);
startTurnAdapter({
  runtime: "hermes",
  run: requireModel(settings.model, async (input, options) => {
    const { acp, sessionId } = await hermes;
    return runPrompt(acp, sessionId, input, options);
  }),
  providerKey: process.env[settings.apiKeyEnv],
  agent: hermes.then((h) => h.acp),
});
