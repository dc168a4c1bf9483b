/**
 * Structured logging shared by the server, the runner and the stacks: one JSON object a line on
 * stderr. Never pass secrets in `fields`. Field names are snake_case (`runner_id`, `session_id`),
 * as on the wire.
 */
export type Logger = (
  level: "debug" | "info" | "warn" | "error",
  msg: string,
  fields?: Record<string, unknown>,
) => void;

export function jsonLogger(component: string): Logger {
  return (level, msg, fields) => {
    pending += `${JSON.stringify({ level, time: new Date().toISOString(), component, msg, ...fields })}\n`;
    if (pending.length >= FLUSH_AT_CHARS) flush();
    else if (!scheduled) {
      scheduled = true;
      setImmediate(flush).unref();
    }
  };
}

/**
 * Lines of one turn of the event loop leave in one write (a busy server logs two lines a proxied
 * request: one write each cost more than the request's relay); in order, all components alike,
 * and whatever is left when the process exits is written then.
 */
const FLUSH_AT_CHARS = 64 * 1024;
let pending = "";
let scheduled = false;
function flush(): void {
  scheduled = false;
  if (pending === "") return;
  const text = pending;
  pending = "";
  process.stderr.write(text);
}
process.on("exit", flush);

export const silentLogger: Logger = () => {};
