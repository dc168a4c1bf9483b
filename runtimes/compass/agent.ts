/**
 * The `compass` runtime's agent for seed-004 sessions (its `spec.agent.command`), run by Bun: the
 * kit's command loop (runtimes/kit/command-loop.ts) around a compass conversation, its frames
 * made natively from the SDK's events. Its conversation is `.compass/agent.json` on the volume
 * (apart from the adapter's), so a reload goes on. A failed model call is an `error` frame and a
 * failed result.
 */
import { runCommandLoop } from "../kit/command-loop.ts";
import { makeUndumpable } from "./no-dump.ts";
import { CompassSession } from "./session.ts";
import { compassSettings } from "./settings.ts";

makeUndumpable();
const settings = compassSettings();
const session = new CompassSession(settings, "agent");
runCommandLoop({
  runtime: "compass",
  run: (text, options) => session.run(text, options),
  providerKey: settings.apiKey,
  // Stdin closed: what was sent is still answered, then the agent ends.
  finishOnStdinEnd: true,
});
