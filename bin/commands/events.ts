import type { Frame } from "../../contracts/compass.ts";
import { ClientError } from "../../client/client-error.ts";
import { contextFrom, HintedError, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { harnessSessionOf } from "../watch.ts";

const USAGE = "events --follow [--session NAME|SESSION_ID] [-n NAMESPACE] [--since EVENT_ID]";

/** One line a frame: id, time, the HarnessSession (or the agent session id), type, then the payload. */
export function frameLine(id: string, frame: Frame, session?: string): string {
  return `${id.padStart(6)}  ${frame.ts}  ${session ?? frame.session_id}  ${frame.type.padEnd(7)} ${JSON.stringify(frame.payload)}`;
}

/** Agent session ids (`ses-…`) are followed as they are; anything else names a HarnessSession. */
const SESSION_ID = /^ses-[0-9a-f]+$/;

/**
 * `events --follow`: compass.v1 frames as they happen, of one session or all, each line naming
 * its HarnessSession (namespace/name) when it has one. A dropped stream is resumed with
 * Last-Event-ID (nothing lost, nothing repeated); `--since ID` replays the retained frames after
 * ID first. `--json` prints each frame as it came.
 */
export const events: Command = {
  name: "events",
  usage: USAGE,
  summary: "follow session frames (phase changes, requests, messages, …) live",
  description: `Follows the event stream: the frames of the sessions you may see (status changes, messages,
tool calls, results, errors), and each HarnessSession's PhaseChanged and RequestFinished events.
Each line: event id, time, the HarnessSession as namespace/name (or the agent session id), type,
payload. --session NAME follows one HarnessSession (in -n NAMESPACE) across its restarts.`,
  flags: [
    ["-f, --follow", "follow the live stream (required); Ctrl-C ends"],
    [
      "--session NAME",
      "one HarnessSession's frames (by name, in -n NAMESPACE), or an agent session id (ses-…)",
    ],
    ["--since EVENT_ID", "replay the retained frames after EVENT_ID first (0: all retained)"],
  ],
  examples: [
    "agent-sessions events -f                             # every session you may see",
    "agent-sessions events -f --session coding            # one HarnessSession by name",
    "agent-sessions events -f --session coding --since 0  # its retained history first",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      follow: { type: "boolean", short: "f", default: false },
      session: { type: "string" },
      since: { type: "string" },
    });
    positionals(parsed.positionals, [], USAGE);
    if (!parsed.values.follow)
      throw new UsageError(
        `events follows the live stream: pass --follow (with --since EVENT_ID, 0 for all retained, to replay first)\nusage: agent-sessions ${USAGE}`,
      );
    const ctx = contextFrom(parsed.values);
    const session = parsed.values.session;
    const byName = session !== undefined && !SESSION_ID.test(session);
    const abort = new AbortController();
    const stop = () => abort.abort();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    try {
      for await (const event of ctx.client.events({
        ...(byName
          ? { harnessSession: { namespace: ctx.namespace, name: session } }
          : { sessionId: session }),
        lastEventId: parsed.values.since,
        signal: abort.signal,
        onReconnect: (attempt, error) =>
          ctx.note(
            `event stream dropped (${error instanceof Error ? error.message : String(error)}); reconnecting (${attempt})…`,
          ),
      })) {
        if (event.kind === "gap") {
          ctx.note(`frames ${event.from_seq}..${event.to_seq} of ${event.session_id} are no longer retained`);
          continue;
        }
        const name = harnessSessionOf(event.frame);
        if (ctx.json) ctx.out(JSON.stringify(name ? { ...event.frame, harness_session: name } : event.frame));
        else ctx.out(frameLine(event.id, event.frame, name));
      }
    } catch (error) {
      if (error instanceof ClientError && error.code === "NOT_FOUND" && session)
        throw new HintedError(
          error,
          byName
            ? `list the sessions with \`agent-sessions get hs -n ${ctx.namespace}\``
            : "session ids are listed by `agent-sessions get sessions`; or pass the HarnessSession's name",
        );
      throw error;
    } finally {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
    }
    return 0;
  },
};
