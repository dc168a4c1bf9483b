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
    process.stderr.write(
      `${JSON.stringify({ level, time: new Date().toISOString(), component, msg, ...fields })}\n`,
    );
  };
}

export const silentLogger: Logger = () => {};
