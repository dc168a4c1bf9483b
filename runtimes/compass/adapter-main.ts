/**
 * The `compass` runtime's v1alpha2 adapter: the session container's main process, run by Bun.
 * It fronts one compass conversation (session.ts, kept on the volume as `.compass/harness.json`)
 * through the kit's adapter entry (runtimes/kit/adapter-entry.ts; its server is plain node:http,
 * which Bun serves): cancel = the SDK's abort, usage from the assistant messages, a failed outcome
 * when the model call fails.
 *
 * The adapter listens while the SDK loads (a request waits for it; an SDK that does not load
 * fails the requests and ends the adapter with exit code 1), so a resumed workload's agent,
 * exec'd by the runner once `/readyz` answers, starts alongside.
 */
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";
import type { CompassSession } from "./session.ts";

// Before anything else: from here on the token is in this process's memory only (Bun has
// process.execve too), whether or not PID 1 is made undumpable below. And before the rest of the
// adapter is loaded: the token's handover re-executes this process, which would load every
// module twice.
adapterTokenOutOfEnvironment();

const [{ startTurnAdapter }, { makeUndumpable }, { compassSettings }] = await Promise.all([
  import("../kit/adapter-entry.ts"),
  import("./no-dump.ts"),
  import("./settings.ts"),
]);

// PID 1's /proc files stay readable to its own uid unless COMPASS_UNDUMPABLE=true: the conformance
// suite reads /proc/1/cwd to see the workload's cwd, and an undumpable PID 1 refuses that. The
// price: a bash tool may read /proc/1/environ, which holds gateway tokens and no secret of the adapter's (the seed-004 agent is undumpable).
if (process.env.COMPASS_UNDUMPABLE === "true") makeUndumpable();
const settings = compassSettings();

let loaded!: (session: Promise<CompassSession>) => void;
const session = new Promise<CompassSession>((resolve) => {
  loaded = resolve;
});
startTurnAdapter({
  runtime: "compass",
  run: async (input, options) => (await session).run(input, options),
  providerKey: settings.apiKey,
  agent: session.then(() => undefined),
});

// The SDK (pi-utils' postmortem) exits 143 at once on SIGTERM; the adapter drains the requests
// in flight first and then exits 0 (runtimes/kit/adapter-server.ts): its handler, registered
// above, stays the only one.
const ours = new Set(process.listeners("SIGTERM"));
loaded(
  import("./session.ts").then(({ CompassSession }) => {
    const made = new CompassSession(settings, "harness");
    for (const listener of process.listeners("SIGTERM"))
      if (!ours.has(listener)) process.off("SIGTERM", listener);
    return made;
  }),
);
