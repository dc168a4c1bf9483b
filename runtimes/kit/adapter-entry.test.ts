import { describe, expect, it } from "vitest";
import { turnHandler } from "./adapter-entry.ts";
import { redactor } from "./redact.ts";
import type { TurnOutcome } from "./turn.ts";

const KEY = "sk-provider-0123456789";
const redact = redactor([KEY]);

describe("a runtime's adapter answering requests one turn each", () => {
  it("streams redacted deltas and tool events as the contract names them, then the redacted answer", async () => {
    const handle = turnHandler(async (input, { onDelta, onTool }) => {
      onDelta?.(KEY);
      onTool?.({ phase: "end", callId: "c1", name: "bash", isError: true });
      return { outcome: "succeeded", text: `${input} ${KEY}`, usage: "unavailable" };
    }, redact);
    const events: unknown[] = [];
    const reply = await handle("hi", {
      requestId: "r1",
      signal: new AbortController().signal,
      onDelta: (text) => events.push({ delta: text }),
      onTool: (event) => events.push(event),
    });
    expect(reply).toEqual({ text: "hi [redacted]", usage: "unavailable" });
    expect(events).toEqual([
      { delta: "[redacted]" },
      { phase: "end", call_id: "c1", name: "bash", is_error: true },
    ]);
  });

  it("runs a request only after the one before it ended, and fails with the turn's redacted error", async () => {
    let release!: (outcome: TurnOutcome) => void;
    const started: string[] = [];
    const handle = turnHandler((input) => {
      started.push(input);
      if (input === "first") return new Promise((resolve) => (release = resolve));
      return Promise.resolve({ outcome: "failed", error: `bad key ${KEY}`, text: "" });
    }, redact);
    const context = { requestId: "r", signal: new AbortController().signal };
    const first = handle("first", context);
    const second = handle("second", context);
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual(["first"]);
    release({ outcome: "succeeded", text: "one", usage: "unavailable" });
    expect(await first).toEqual({ text: "one", usage: "unavailable" });
    await expect(second).rejects.toThrow("bad key [redacted]");
  });

  it("never starts a request cancelled while it waited", async () => {
    const controller = new AbortController();
    controller.abort(new Error("cancelled by request"));
    let ran = false;
    const handle = turnHandler(async () => {
      ran = true;
      return { outcome: "succeeded", text: "", usage: "unavailable" };
    }, redact);
    await expect(handle("x", { requestId: "r", signal: controller.signal })).rejects.toThrow(
      "cancelled by request",
    );
    expect(ran).toBe(false);
  });
});
