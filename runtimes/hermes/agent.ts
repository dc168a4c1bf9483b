/**
 * The `hermes` runtime's agent for seed-004 sessions (its `spec.agent.command`): started by the
 * runner over a long-lived exec stream inside the workload, it reads JSON commands on stdin and
 * writes compass.v1 frames on stdout, around its own `hermes acp` (its own ACP session in the
 * volume's state.db, apart from the adapter's, so both can live in one workspace).
 *
 * Commands, one JSON object a line: {"type":"message","text":"…"} prompts Hermes — `delta` frames
 * as text streams, `tool` frames as tools start and end, then a `message` frame with the answer
 * and a `result` frame with the outcome and usage; {"type":"cancel"} cancels the turn running;
 * {"type":"exit"} ends the agent cleanly. Messages run one after another.
 */
import { redactor } from "../kit/redact.ts";
import { hermesAgentSettings, startHermes } from "./hermes-agent.ts";
import { runPrompt } from "./prompt-run.ts";

const USE = "agent";

function emit(type: string, payload: Record<string, unknown>): void {
  process.stdout.write(
    `${JSON.stringify({ protocol: "compass.v1", type, ts: new Date().toISOString(), payload })}\n`,
  );
}

const settings = hermesAgentSettings();
const redact = redactor([process.env[settings.apiKeyEnv], process.env.ADAPTER_TOKEN]);
const hermes = await startHermes(settings, USE);
let exiting = false;
void hermes.acp.exited.then((code) => {
  if (exiting) return;
  emit("error", { message: "hermes exited", code });
  process.exit(1);
});
emit("log", { message: "agent started", runtime: "hermes", resumed: hermes.resumed });

let queue: Promise<unknown> = Promise.resolve();
let current: AbortController | undefined;

async function answer(text: string): Promise<void> {
  if (!settings.model) {
    emit("error", { message: "no model endpoint configured (the Agent names none)" });
    emit("result", { outcome: "failed", usage: "unavailable" });
    return;
  }
  const controller = new AbortController();
  current = controller;
  try {
    const outcome = await runPrompt(hermes.acp, hermes.sessionId, text, {
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

async function exit(code: number): Promise<never> {
  exiting = true;
  current?.abort();
  await hermes.acp.stop();
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
process.stdin.on("end", () => void exit(0));
process.on("SIGTERM", () => void exit(0));

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
        return exit(0);
      });
      return;
    default:
      emit("error", { message: `unknown command ${String(command.type)}` });
  }
}
