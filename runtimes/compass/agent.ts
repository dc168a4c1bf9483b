/**
 * The `compass` runtime's agent for seed-004 sessions (its `spec.agent.command`), run by Bun: the
 * kit's command loop (runtimes/kit/command-loop.ts) around a compass conversation, its frames
 * made natively from the SDK's events. Its conversation is `.compass/agent.json` on the volume
 * (apart from the adapter's), so a reload goes on. A failed model call is an `error` frame and a
 * failed result. The SDK loads with the first message: a resumed workload's first answer (its
 * adapter's SDK) does not share the workload's CPU with a second SDK loading.
 */
import { runCommandLoop } from "../kit/command-loop.ts";
import { makeUndumpable } from "./no-dump.ts";
import type { CompassSession } from "./session.ts";
import { compassSettings } from "./settings.ts";

makeUndumpable();
const settings = compassSettings();
let session: Promise<CompassSession> | undefined;
const started = (): Promise<CompassSession> => {
  session ??= import("./session.ts").then(({ CompassSession }) => new CompassSession(settings, "agent"));
  return session;
};
runCommandLoop({
  runtime: "compass",
  run: async (text, options) => (await started()).run(text, options),
  providerKey: settings.apiKey,
  agent: async () => {
    await started();
    return undefined;
  },
  // Stdin closed: what was sent is still answered, then the agent ends.
  finishOnStdinEnd: true,
});
