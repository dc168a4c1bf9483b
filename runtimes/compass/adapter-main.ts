/**
 * The `compass` runtime's v1alpha2 adapter: the session container's main process, run by Bun.
 * It fronts one compass conversation (session.ts, kept on the volume as `.compass/harness.json`)
 * through the kit's adapter entry (runtimes/kit/adapter-entry.ts; its server is plain node:http,
 * which Bun serves): cancel = the SDK's abort, usage from the assistant messages, a failed outcome
 * when the model call fails.
 */
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";

// Before anything else: from here on the token is in this process's memory only (Bun has
// process.execve too), whether or not PID 1 is made undumpable below. And before the rest of the
// adapter (the SDK) is loaded: the token's handover re-executes this process, which would load
// every module twice.
adapterTokenOutOfEnvironment();

const [{ startTurnAdapter }, { makeUndumpable }, { CompassSession }, { compassSettings }] = await Promise.all(
  [
    import("../kit/adapter-entry.ts"),
    import("./no-dump.ts"),
    import("./session.ts"),
    import("./settings.ts"),
  ],
);

// PID 1's /proc files stay readable to its own uid unless COMPASS_UNDUMPABLE=true: the conformance
// suite reads /proc/1/cwd to see the workload's cwd, and an undumpable PID 1 refuses that. The
// price: a bash tool may read /proc/1/environ, which holds gateway tokens and no secret of the adapter's (the seed-004 agent is undumpable).
if (process.env.COMPASS_UNDUMPABLE === "true") makeUndumpable();
const settings = compassSettings();
const session = new CompassSession(settings, "harness");

// The SDK (pi-utils' postmortem) exits 143 at once on SIGTERM; the adapter drains the requests
// in flight first and then exits 0 (runtimes/kit/adapter-server.ts): its handler is the only one.
process.removeAllListeners("SIGTERM");

startTurnAdapter({
  runtime: "compass",
  run: (input, options) => session.run(input, options),
  providerKey: settings.apiKey,
});
