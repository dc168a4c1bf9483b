/**
 * The `pi` runtime's agent for seed-004 sessions (its `spec.agent.command`): the kit's command
 * loop (runtimes/kit/command-loop.ts) around its own `pi --mode rpc` (its own pi session on the
 * volume, apart from the adapter's, so both can live in one workspace).
 */
import { runCommandLoop } from "../kit/command-loop.ts";
import { requireModel } from "../kit/turn.ts";
import { piAgentSettings, startPi } from "./pi-agent.ts";
import { runPrompt } from "./prompt-run.ts";

const SESSION_ID = "agent";

const settings = piAgentSettings();
const pi = await startPi(settings, SESSION_ID);
runCommandLoop({
  runtime: "pi",
  run: requireModel(settings.model, (text, options) => runPrompt(pi, text, options)),
  providerKey: process.env[settings.apiKeyEnv],
  agent: pi,
});
