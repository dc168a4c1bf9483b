/**
 * The reference agent: speaks compass.v1 NDJSON on stdout, reads commands as JSON lines on
 * stdin. Started by the runner over a long-lived exec stream inside the session container.
 *
 * Commands (one JSON object a line): {"type":"message","text":"…"} answers with a message frame;
 * {"type":"crash"} exits 3; {"type":"exit"} exits 0 cleanly; {"type":"hang"} stops answering;
 * {"type":"flood","count":N} emits N log frames; {"type":"garbage"} writes a malformed line;
 * {"type":"spew","mb":N} writes N MiB without a newline (then ends the line and logs "spew done");
 * {"type":"forge"} writes a status frame (only the server may: the runner refuses it).
 * State lives on the workspace volume, so a reload resumes from it.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

const workspace = process.env.AGENT_WORKSPACE ?? "/workspace";
const stateFile = `${workspace}/.agent-state.json`;

type State = { starts: number; messages: number };
function loadState(): State {
  try {
    return JSON.parse(readFileSync(stateFile, "utf8")) as State;
  } catch {
    return { starts: 0, messages: 0 };
  }
}
const state = loadState();
state.starts += 1;
writeFileSync(stateFile, JSON.stringify(state));

function emit(type: string, payload: Record<string, unknown>): void {
  process.stdout.write(
    `${JSON.stringify({ protocol: "compass.v1", type, ts: new Date().toISOString(), payload })}\n`,
  );
}

emit("log", { message: "agent started", starts: state.starts, messages: state.messages });
let hung = false;
const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (hung) return;
  let cmd: { type?: string; text?: string; count?: number; mb?: number };
  try {
    cmd = JSON.parse(line) as typeof cmd;
  } catch {
    emit("error", { message: "command is not JSON" });
    return;
  }
  switch (cmd.type) {
    case "message":
      state.messages += 1;
      writeFileSync(stateFile, JSON.stringify(state));
      emit("message", { role: "assistant", text: `echo: ${cmd.text ?? ""}`, messages: state.messages });
      break;
    case "crash":
      process.exit(3);
      break;
    case "exit":
      emit("result", { outcome: "succeeded" });
      process.exit(0);
      break;
    case "hang":
      hung = true;
      break;
    case "flood":
      for (let i = 0; i < (cmd.count ?? 1000); i++) emit("log", { i });
      break;
    case "garbage":
      process.stdout.write("this is not json\n");
      break;
    case "spew": {
      // One endless line: stdout is a pipe, so each write waits for the reader (the runner).
      const mib = Buffer.alloc(1024 * 1024, 0x78);
      const mb = Math.max(0, Math.min(cmd.mb ?? 1, 4096));
      for (let i = 0; i < mb; i++) process.stdout.write(mib);
      process.stdout.write("\n");
      emit("log", { message: "spew done", mb });
      break;
    }
    case "forge":
      emit("status", { state: "STOPPED" });
      break;
    default:
      emit("error", { message: `unknown command ${String(cmd.type)}` });
  }
});
lines.on("close", () => process.exit(0));
process.on("SIGTERM", () => process.exit(0));
