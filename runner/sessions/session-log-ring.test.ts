import { describe, expect, it } from "vitest";
import { tailOf } from "../../contracts/session-logs.ts";
import { AGENT_PID_MARKER } from "../engine/agent-exec.ts";
import { redactLine } from "./log-redaction.ts";
import { RING_LINES_MAX, SessionLogRing } from "./session-log-ring.ts";

describe("SessionLogRing", () => {
  it("splits chunks into lines, keeps a partial line for the rest, and leaves out the PID note", () => {
    const ring = new SessionLogRing();
    ring.write("w", "agent", "stderr", `${AGENT_PID_MARKER}42\nfirst\nsec`);
    ring.write("w", "agent", "stderr", "ond\n");
    expect(ring.read("w").lines.map((l) => l.line)).toEqual(["first", "second"]);
  });

  it("is bounded: the oldest lines go first and `dropped` says so", () => {
    const ring = new SessionLogRing();
    for (let i = 0; i < RING_LINES_MAX + 5; i++) ring.note("w", "agent", "stderr", `line ${i}`);
    const { lines, dropped } = ring.read("w");
    expect(lines).toHaveLength(RING_LINES_MAX);
    expect(lines[0]?.line).toBe("line 5");
    expect(dropped).toBe(true);
  });

  it("redacts the workspace's secrets and credential-shaped text as lines come in; forget drops both", () => {
    const ring = new SessionLogRing();
    ring.setSecrets("w", ["provider-key-0123456789"]);
    ring.note("w", "agent", "stderr", "using provider-key-0123456789 now");
    ring.note("w", "agent", "stderr", "Authorization: Bearer abcdefghijklmnop");
    expect(ring.read("w").lines.map((l) => l.line)).toEqual([
      "using [redacted] now",
      "Authorization: Bearer [redacted]",
    ]);
    ring.forget("w");
    expect(ring.read("w").lines).toEqual([]);
    expect(ring.secretsOf("w")).toEqual([]);
  });
});

describe("redactLine", () => {
  it("replaces assignments of token-, key- and password-named variables and known prefixes", () => {
    expect(redactLine("MODEL_API_KEY=sk-abcdefghijklmnop", [])).toBe("MODEL_API_KEY=[redacted]");
    expect(redactLine('{"GITHUB_TOKEN": "ghp_abcdefghijklmnop"}', [])).toBe('{"GITHUB_TOKEN": "[redacted]"}');
    expect(redactLine("key ast_abcdefghijklmnopqrstu here", [])).toBe("key [redacted] here");
    expect(redactLine("password: hunter2hunter2", [])).toBe("password: [redacted]");
    expect(redactLine("an ordinary line about tokens", [])).toBe("an ordinary line about tokens");
  });
  it("does not look for secrets shorter than 8 characters", () => {
    expect(redactLine("the cat sat", ["cat"])).toBe("the cat sat");
  });
});

describe("tailOf", () => {
  const line = (text: string) => ({
    ts: "2026-01-01T00:00:00.000Z",
    source: "agent" as const,
    stream: "stderr" as const,
    line: text,
  });
  it("keeps the last lines within the count and the bytes, saying when it left any out", () => {
    const lines = ["a", "bb", "ccc"].map(line);
    expect(tailOf(lines, 2, 1000)).toEqual({ lines: [line("bb"), line("ccc")], truncated: true });
    expect(tailOf(lines, 10, 4)).toEqual({ lines: [line("ccc")], truncated: true });
    expect(tailOf(lines, 10, 1000)).toEqual({ lines, truncated: false });
  });
});
