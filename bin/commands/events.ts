import type { Frame } from "../../contracts/compass.ts";
import { ClientError } from "../../client/client-error.ts";
import { contextFrom, HintedError, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";

const USAGE = "events --follow [--session SESSION_ID] [--since EVENT_ID]";

/** One line a frame: id, time, session, type, then the payload. */
export function frameLine(id: string, frame: Frame): string {
  return `${id.padStart(6)}  ${frame.ts}  ${frame.session_id}  ${frame.type.padEnd(7)} ${JSON.stringify(frame.payload)}`;
}

/**
 * `events --follow`: compass.v1 frames as they happen, of one session or all. A dropped stream
 * is resumed with Last-Event-ID (nothing lost, nothing repeated); `--since ID` replays the
 * retained frames after ID first. `--json` prints each frame as it came.
 */
export const events: Command = {
  name: "events",
  usage: USAGE,
  summary: "follow session frames (status changes, messages, …) live",
  flags: [
    ["-f, --follow", "follow the live stream (required); Ctrl-C ends"],
    [
      "--session NAME",
      "one HarnessSession's frames (by name, in -n NAMESPACE), or an agent session id (ses-\u2026)",
    ],
    ["--since EVENT_ID", "replay the retained frames after EVENT_ID first (0: all retained)"],
  ],
  examples: [
    "agent-sessions events -f                          # every session you may see",
    "agent-sessions events -f --session coding         # one HarnessSession by name",
    "agent-sessions events -f --session coding --since 0   # its retained history first",
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
    const abort = new AbortController();
    const stop = () => abort.abort();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    try {
      for await (const event of ctx.client.events({
        sessionId: parsed.values.session,
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
        ctx.out(ctx.json ? JSON.stringify(event.frame) : frameLine(event.id, event.frame));
      }
    } catch (error) {
      if (error instanceof ClientError && error.code === "NOT_FOUND" && parsed.values.session)
        throw new HintedError(
          error,
          "session ids are listed by `agent-sessions get sessions`; a HarnessSession's is status.sessionId (`agent-sessions describe hs NAME`)",
        );
      throw error;
    } finally {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
    }
    return 0;
  },
};
