import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { type CommandLoopOptions, runCommandLoop } from "./command-loop.ts";
import type { AgentProcess } from "./json-lines-child.ts";
import type { RunTurn } from "./turn.ts";

const KEY = "sk-provider-0123456789";

/** A loop on in-memory stdin/stdout; `frames()` parses what it wrote, `ended` resolves with its exit code. */
function loop(run: RunTurn, extra: Pick<CommandLoopOptions, "finishOnStdinEnd" | "agent"> = {}) {
  const input = new PassThrough();
  const lines: string[] = [];
  let ended!: (code: number) => void;
  const exited = new Promise<number>((resolve) => {
    ended = resolve;
  });
  runCommandLoop({
    runtime: "test",
    run,
    providerKey: KEY,
    input,
    write: (line) => lines.push(line),
    exit: (code) => ended(code),
    env: { ADAPTER_TOKEN: "adapter-token-0123456789" },
    ...extra,
  });
  const frames = () =>
    lines.map((l) => JSON.parse(l) as { protocol: string; type: string; payload: Record<string, unknown> });
  return { send: (command: object) => input.write(`${JSON.stringify(command)}\n`), input, frames, exited };
}

describe("a runtime's seed-004 command loop (compass.v1 frames on stdout)", () => {
  it("answers each message with deltas, tools, the message and its result, secrets redacted", async () => {
    const agent = loop(async (text, { onDelta, onTool }) => {
      onDelta?.(`echo ${KEY}`);
      onTool?.({ phase: "start", callId: "c1", name: "bash" });
      onTool?.({ phase: "end", callId: "c1", name: "bash", isError: false });
      return { outcome: "succeeded", text: `${text} ${KEY}`, usage: { input_tokens: 3, output_tokens: 1 } };
    });
    agent.send({ type: "message", text: "hi" });
    agent.send({ type: "exit" });
    expect(await agent.exited).toBe(0);
    expect(agent.frames().map((f) => [f.type, f.payload])).toEqual([
      ["log", { message: "agent started", runtime: "test" }],
      ["delta", { text: "echo [redacted]" }],
      ["tool", { phase: "start", call_id: "c1", name: "bash" }],
      ["tool", { phase: "end", call_id: "c1", name: "bash", is_error: false }],
      ["message", { role: "assistant", text: "hi [redacted]" }],
      ["result", { outcome: "succeeded", usage: { input_tokens: 3, output_tokens: 1 } }],
      ["result", { outcome: "succeeded" }],
    ]);
    expect(agent.frames().every((f) => f.protocol === "compass.v1")).toBe(true);
  });

  it("runs messages one after another, and a cancel aborts the one running", async () => {
    const seen: string[] = [];
    const agent = loop(
      (text, { signal }) =>
        new Promise((resolve) => {
          seen.push(text);
          if (text === "quick") resolve({ outcome: "succeeded", text, usage: "unavailable" });
          signal?.addEventListener("abort", () => resolve({ outcome: "cancelled", text: "" }));
        }),
      { finishOnStdinEnd: true },
    );
    agent.send({ type: "message", text: "slow" });
    agent.send({ type: "message", text: "quick" });
    await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual(["slow"]);
    agent.send({ type: "cancel" });
    agent.input.end();
    expect(await agent.exited).toBe(0);
    expect(seen).toEqual(["slow", "quick"]);
    expect(
      agent
        .frames()
        .filter((f) => f.type === "result")
        .map((f) => f.payload.outcome),
    ).toEqual(["cancelled", "succeeded"]);
  });

  it("reports a failed turn and bad commands as error frames", async () => {
    const agent = loop(async () => ({ outcome: "failed", error: `model said ${KEY}`, text: "" }));
    agent.input.write("not json\n");
    agent.send({ type: "message" });
    agent.send({ type: "dance" });
    agent.send({ type: "message", text: "hi" });
    agent.send({ type: "exit" });
    await agent.exited;
    expect(agent.frames().map((f) => [f.type, f.payload])).toEqual([
      ["log", { message: "agent started", runtime: "test" }],
      ["error", { message: "command is not JSON" }],
      ["error", { message: "a message needs text" }],
      ["error", { message: "unknown command dance" }],
      ["error", { message: "model said [redacted]" }],
      ["result", { outcome: "failed", usage: "unavailable" }],
      ["result", { outcome: "succeeded" }],
    ]);
  });

  it("says agent started at once and starts an agent given as a start with the first message, once", async () => {
    let starts = 0;
    let stopped = 0;
    const started: AgentProcess = {
      running: true,
      exited: new Promise(() => undefined),
      stop: async () => {
        stopped++;
      },
    };
    const agent = loop(async (text) => ({ outcome: "succeeded", text, usage: "unavailable" }), {
      agent: async () => {
        starts++;
        return started;
      },
    });
    await new Promise((r) => setImmediate(r));
    expect(agent.frames().map((f) => f.payload.message)).toEqual(["agent started"]);
    expect(starts).toBe(0); // nothing asked yet: no agent loaded
    agent.send({ type: "message", text: "one" });
    agent.send({ type: "message", text: "two" });
    agent.send({ type: "exit" });
    expect(await agent.exited).toBe(0);
    expect(starts).toBe(1);
    expect(stopped).toBe(1);
    expect(
      agent
        .frames()
        .filter((f) => f.type === "message")
        .map((f) => f.payload.text),
    ).toEqual(["one", "two"]);
  });

  it("reports an agent that does not start as an error frame (redacted) and a failed result, and exits 1", async () => {
    let ran = false;
    const agent = loop(
      async (text) => {
        ran = true;
        return { outcome: "succeeded", text, usage: "unavailable" };
      },
      {
        agent: async () => {
          throw new Error(`pi did not start: it exited (key ${KEY})`);
        },
      },
    );
    agent.send({ type: "message", text: "hi" });
    expect(await agent.exited).toBe(1);
    expect(ran).toBe(false);
    expect(agent.frames().map((f) => [f.type, f.payload])).toEqual([
      ["log", { message: "agent started", runtime: "test" }],
      ["error", { message: "pi did not start: it exited (key [redacted])" }],
      ["result", { outcome: "failed", usage: "unavailable" }],
    ]);
  });
});
