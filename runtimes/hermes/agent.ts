/**
 * The `hermes` runtime's agent for seed-004 sessions (its `spec.agent.command`): the kit's command
 * loop (runtimes/kit/command-loop.ts) around its own `hermes acp` (its own ACP session in the
 * volume's state.db, apart from the adapter's, so both can live in one workspace), started with
 * the first message: a resumed workload's first answer (its adapter's Hermes) does not share the
 * workload's CPU with a second Hermes loading, nor its memory with one never asked.
 */
import { runCommandLoop } from "../kit/command-loop.ts";
import { requireModel } from "../kit/turn.ts";
import { type HermesSession, hermesAgentSettings, startHermes } from "./hermes-agent.ts";
import { runPrompt } from "./prompt-run.ts";

const USE = "agent";

const settings = hermesAgentSettings();
let hermes: Promise<HermesSession> | undefined;
const started = (): Promise<HermesSession> => {
  hermes ??= startHermes(settings, USE);
  return hermes;
};
runCommandLoop({
  runtime: "hermes",
  run: requireModel(settings.model, async (text, options) => {
    const { acp, sessionId } = await started();
    return runPrompt(acp, sessionId, text, options);
  }),
  providerKey: process.env[settings.apiKeyEnv],
  agent: () => started().then((h) => h.acp),
});
