import { describe, expect, it, vi } from "vitest";
import type { ServerToRunner } from "../../contracts/runner-protocol.ts";
import { RunnerConnection } from "./runner-connection.ts";
import type { RunnerSocket } from "./runner-socket.ts";

function recordingSocket(sent: ServerToRunner[]): RunnerSocket {
  return {
    open: true,
    closable: true,
    isPaused: false,
    send: (text, done) => {
      sent.push(JSON.parse(text as string) as ServerToRunner);
      done();
    },
    close: () => {},
    terminate: () => {},
    pause: () => {},
    resume: () => {},
  };
}

describe("a command's deadline on the server (PROTOCOL.md §7)", () => {
  it("tells the runner the deadline, and cancels the command there when it passes", async () => {
    vi.useFakeTimers();
    try {
      const sent: ServerToRunner[] = [];
      const connection = new RunnerConnection(recordingSocket(sent), 0, { kind: "registration" });
      const reply = connection.request({ kind: "workspace_list", container_name: "c", path: "" }, 5_000);
      await vi.advanceTimersByTimeAsync(0);
      const command = sent.find((m) => m.type === "command");
      expect(command?.payload).toMatchObject({ deadline_ms: 5_000 });
      await vi.advanceTimersByTimeAsync(5_000);
      expect(await reply).toMatchObject({ ok: false, error: { code: "DEADLINE_EXCEEDED" } });
      expect(sent.find((m) => m.type === "cancel")?.payload).toEqual({
        command_id: command?.type === "command" ? command.payload.command_id : "?",
      });
    } finally {
      vi.useRealTimers();
    }
  });
});
