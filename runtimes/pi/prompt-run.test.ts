import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { summedUsage, type ToolEvent } from "../kit/turn.ts";
import { runPrompt } from "./prompt-run.ts";
import { PiRpcClient } from "./rpc-client.ts";

const fakePi = fileURLToPath(new URL("../../test/fixtures/fake-pi-rpc.ts", import.meta.url));
const clients: PiRpcClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.stop(500);
});
function start(): PiRpcClient {
  const pi = new PiRpcClient({ command: [process.execPath, fakePi], cwd: process.cwd(), env: process.env });
  clients.push(pi);
  return pi;
}

describe("one prompt through pi's RPC mode", () => {
  it("streams the text of every assistant message, reports tools, and sums the usage", async () => {
    const pi = start();
    const deltas: string[] = [];
    const tools: ToolEvent[] = [];
    const outcome = await runPrompt(pi, "two turns", {
      onDelta: (d) => deltas.push(d),
      onTool: (t) => tools.push(t),
    });
    expect(outcome).toEqual({
      outcome: "succeeded",
      text: "Writing\n\nDone",
      usage: { input_tokens: 22, output_tokens: 3 },
    });
    expect(deltas.join("")).toBe("Writing\n\nDone");
    expect(tools).toEqual([
      { phase: "start", callId: "call_1", name: "write" },
      { phase: "end", callId: "call_1", name: "write", isError: false },
    ]);
  });

  it("splits records on LF only: U+2028 inside a JSON string stays in the text", async () => {
    const outcome = await runPrompt(start(), "hello");
    expect(outcome).toMatchObject({ outcome: "succeeded", text: "you said: hello \u2028 end" });
  });

  it("records usage the model did not report as unavailable, never as zero", async () => {
    expect(await runPrompt(start(), "no usage")).toEqual({
      outcome: "succeeded",
      text: "quiet",
      usage: "unavailable",
    });
  });

  it("fails with the model's error when the last assistant message ended in error", async () => {
    expect(await runPrompt(start(), "fail")).toEqual({ outcome: "failed", error: "500 boom", text: "" });
  });

  it("cancels with `abort` and keeps what streamed before", async () => {
    const controller = new AbortController();
    const run = runPrompt(start(), "hang", { signal: controller.signal, onDelta: () => controller.abort() });
    expect(await run).toEqual({ outcome: "cancelled", text: "partial" });
  });

  it("gives up on a pi that never settles after `abort`", async () => {
    const controller = new AbortController();
    const run = runPrompt(start(), "deaf", {
      signal: controller.signal,
      onDelta: () => controller.abort(),
      abortGraceMs: 50,
    });
    expect(await run).toEqual({ outcome: "cancelled", text: "partial" });
  });

  it("fails the request when pi exits during it, and later commands answer unsuccessfully", async () => {
    const pi = start();
    expect(await runPrompt(pi, "die")).toMatchObject({
      outcome: "failed",
      error: "the pi agent exited during the request",
    });
    expect(await pi.exited).toBe(3);
    expect((await pi.command("get_state")).success).toBe(false);
  });
});

describe("usage of a run", () => {
  it("is unavailable when any assistant message reported none, or there was none", () => {
    expect(summedUsage([])).toBe("unavailable");
    expect(summedUsage([{ input: 5, output: 1 }, undefined])).toBe("unavailable");
    expect(
      summedUsage([
        { input: 5, output: 1 },
        { input: 0, output: 0 },
      ]),
    ).toBe("unavailable");
    expect(
      summedUsage([
        { input: 5, output: 1 },
        { input: 7, output: 2 },
      ]),
    ).toEqual({
      input_tokens: 12,
      output_tokens: 3,
    });
  });
});
