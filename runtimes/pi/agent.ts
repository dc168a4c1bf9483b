/**
 * The `pi` runtime's agent for seed-004 sessions (its `spec.agent.command`): the kit's command
 * loop (runtimes/kit/command-loop.ts) around its own `pi --mode rpc` (its own pi session on the
 * volume, apart from the adapter's, so both can live in one workspace), started with the first
 * message: a resumed workload's first answer (its adapter's pi) does not share the workload's CPU
 * with a second pi loading, nor its memory with one never asked.
 */
import { runCommandLoop } from "../kit/command-loop.ts";
import { requireModel } from "../kit/turn.ts";
import { piAgentSettings, startPi } from "./pi-agent.ts";
import type { PiRpcClient } from "./rpc-client.ts";
import { runPrompt } from "./prompt-run.ts";

const SESSION_ID = "agent";

const settings = piAgentSettings();
let pi: Promise<PiRpcClient> | undefined;
const started = (): Promise<PiRpcClient> => {
  pi ??= startPi(settings, SESSION_ID);
  return pi;
};
runCommandLoop({
  runtime: "pi",
  run: requireModel(settings.model, async (text, options) => runPrompt(await started(), text, options)),
  providerKey: process.env[settings.apiKeyEnv],
  agent: started,
});
