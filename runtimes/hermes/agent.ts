/**
 * The `hermes` runtime's agent for seed-004 sessions (its `spec.agent.command`): the kit's command
 * loop (runtimes/kit/command-loop.ts) around its own `hermes acp` (its own ACP session in the
 * volume's state.db, apart from the adapter's, so both can live in one workspace).
 */
import { runCommandLoop } from "../kit/command-loop.ts";
import { requireModel } from "../kit/turn.ts";
import { hermesAgentSettings, startHermes } from "./hermes-agent.ts";
import { runPrompt } from "./prompt-run.ts";

const USE = "agent";

const settings = hermesAgentSettings();
const hermes = await startHermes(settings, USE);
runCommandLoop({
  runtime: "hermes",
  started: { resumed: hermes.resumed },
  run: requireModel(settings.model, (text, options) =>
    runPrompt(hermes.acp, hermes.sessionId, text, options),
  ),
  providerKey: process.env[settings.apiKeyEnv],
  agent: hermes.acp,
});
