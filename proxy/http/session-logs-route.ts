import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { LogQuery } from "../../contracts/session-logs.ts";
import { FOLLOW_POLL_MS, type SessionLogsReader } from "../harness/session-logs.ts";
import { parseInput } from "../lifecycle/request-body.ts";

/**
 * `GET …/harnesssessions/{name}/logs?tailLines=&limitBytes=&sinceTime=&follow=`: JSON
 * (`SessionLogsReply`), or with `follow=true` server-sent events: one `logs` event of the tail,
 * then one for each batch of new lines (asked of the runner every second) until the client
 * leaves. A follow whose session is deleted ends with an `error` event.
 */
export async function sessionLogsRoute(
  c: Context,
  logs: SessionLogsReader,
  namespace: string,
  name: string,
): Promise<Response> {
  const query = parseInput(LogQuery, c.req.query(), "logs query", { in: "query", name: "query" });
  const first = await logs.read(namespace, name, query);
  if (!query.follow) return c.json(first);
  return streamSSE(c, async (stream) => {
    let since = first.lines.at(-1)?.ts ?? query.sinceTime;
    let aborted = false;
    stream.onAbort(() => {
      aborted = true;
    });
    await stream.writeSSE({ event: "logs", data: JSON.stringify(first) });
    while (!aborted) {
      await stream.sleep(FOLLOW_POLL_MS);
      if (aborted) break;
      try {
        const next = await logs.read(namespace, name, {
          ...query,
          tailLines: 10_000,
          ...(since ? { sinceTime: since } : {}),
        });
        // Lines stamped the same instant as the last one sent were in that answer already.
        const fresh = next.lines.filter((l) => since === undefined || l.ts > since);
        if (fresh.length > 0) {
          since = fresh.at(-1)?.ts;
          await stream.writeSSE({ event: "logs", data: JSON.stringify({ ...next, lines: fresh }) });
        } else await stream.write(": keep-alive\n\n");
      } catch (error) {
        const { code = "INTERNAL", message = String(error) } = error as { code?: string; message?: string };
        await stream.writeSSE({ event: "error", data: JSON.stringify({ code, message }) });
        break;
      }
    }
  });
}
