/**
 * The `compass` runtime's agent for seed-004 sessions (its `spec.agent.command`), run by Bun: the
 * runner starts it over a long-lived exec stream inside the workload; it reads JSON commands on
 * stdin and writes compass.v1 frames natively from the SDK's events on stdout. Its conversation
 * is `.compass/agent.json` on the volume (apart from the adapter's), so a reload goes on.
 *
 * Commands, one JSON object a line: {"type":"message","text":"…"} prompts the agent — `delta`
 * frames as text streams, `tool` frames as tools start and end, then a `message` frame with the
 * answer and a `result` frame with the outcome and the usage (or `"unavailable"`); a failed model
 * call is an `error` frame and a failed result. {"type":"cancel"} aborts the prompt running;
 * {"type":"exit"} ends the agent cleanly. Messages run one after another.
 */
import { redactor } from "../kit/redact.ts";
import { makeUndumpable } from "./no-dump.ts";
import { CompassSession } from "./session.ts";
import { compassSettings } from "./settings.ts";

function emit(type: string, payload: Record<string, unknown>): void {
  process.stdout.write(
    `${JSON.stringify({ protocol: "compass.v1", type, ts: new Date().toISOString(), payload })}\n`,
  );
}

makeUndumpable();
const settings = compassSettings();
const redact = redactor([settings.apiKey, process.env.ADAPTER_TOKEN]);
const session = new CompassSession(settings, "agent");
emit("log", { message: "agent started", runtime: "compass" });

let queue: Promise<unknown> = Promise.resolve();
let current: AbortController | undefined;

async function answer(text: string): Promise<void> {
  const controller = new AbortController();
  current = controller;
  try {
    const outcome = await session.run(text, {
      signal: controller.signal,
      onDelta: (delta) => emit("delta", { text: redact(delta) }),
      onTool: (e) =>
        emit("tool", {
          phase: e.phase,
          call_id: e.callId,
          name: e.name,
          ...(e.isError !== undefined ? { is_error: e.isError } : {}),
        }),
    });
    if (outcome.outcome === "succeeded") {
      emit("message", { role: "assistant", text: redact(outcome.text) });
      emit("result", { outcome: "succeeded", usage: outcome.usage });
    } else if (outcome.outcome === "failed") {
      emit("error", { message: redact(outcome.error) });
      emit("result", { outcome: "failed", usage: "unavailable" });
    } else emit("result", { outcome: "cancelled", usage: "unavailable" });
  } finally {
    current = undefined;
  }
}

function exit(code: number): never {
  current?.abort();
  process.exit(code);
}

// Records are split on LF only (JSON strings may hold U+2028/U+2029, which readline splits on).
let buffer = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk: string) => {
  buffer += chunk;
  for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
    const line = buffer.slice(0, i).trim();
    buffer = buffer.slice(i + 1);
    if (line) handle(line);
  }
});
// Stdin closed: what was sent is still answered, then the agent ends.
process.stdin.on("end", () => void queue.then(() => exit(0)));
process.on("SIGTERM", () => exit(0));

function handle(line: string): void {
  let command: { type?: string; text?: string };
  try {
    command = JSON.parse(line) as typeof command;
  } catch {
    emit("error", { message: "command is not JSON" });
    return;
  }
  switch (command.type) {
    case "message": {
      const text = command.text ?? "";
      if (!text) {
        emit("error", { message: "a message needs text" });
        return;
      }
      queue = queue
        .then(() => answer(text))
        .catch((error: Error) => emit("error", { message: redact(error.message) }));
      return;
    }
    case "cancel":
      current?.abort();
      return;
    case "exit":
      void queue.then(() => {
        emit("result", { outcome: "succeeded" });
        exit(0);
      });
      return;
    default:
      emit("error", { message: `unknown command ${String(command.type)}` });
  }
}
