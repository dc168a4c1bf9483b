import { describe, expect, it } from "vitest";
import { RelayInbox } from "./relay-inbox.ts";

const chunk = (data: string, done = false) => ({ relay_id: "r", data, done });

describe("the relay inbox", () => {
  it("hands over chunks in order and closes on the done chunk", async () => {
    const inbox = new RelayInbox();
    inbox.push(chunk("a"));
    inbox.push(chunk("b", true));
    inbox.push(chunk("late"));
    expect(await inbox.next()).toMatchObject({ kind: "chunk", data: "a" });
    expect(await inbox.next()).toMatchObject({ kind: "chunk", data: "b", done: true });
    expect(inbox.closed).toBe(true);
  });

  it("hands over what is already here without waiting (a streamed reply's chunks of one read leave in one write)", async () => {
    const inbox = new RelayInbox();
    expect(inbox.ready()).toBeUndefined();
    inbox.push(chunk("a"));
    inbox.push(chunk("b"));
    inbox.fail({ code: "DEADLINE_EXCEEDED", message: "late" });
    expect(inbox.ready()).toMatchObject({ kind: "chunk", data: "a" });
    expect(inbox.ready()).toMatchObject({ kind: "chunk", data: "b" });
    expect(inbox.ready()).toMatchObject({ kind: "error", error: { code: "DEADLINE_EXCEEDED" } });
    expect(inbox.ready()).toBeUndefined();
  });

  it("is bounded on push: past maxBytes nothing more is queued, it fails RESOURCE_EXHAUSTED and says so once", async () => {
    let overflows = 0;
    const inbox = new RelayInbox({ maxBytes: 10, onOverflow: () => overflows++ });
    inbox.push(chunk("12345"));
    inbox.push(chunk("67890"));
    // Nobody takes anything (a slow client): the next pushes must not pile up.
    for (let i = 0; i < 1_000; i++) inbox.push(chunk("x".repeat(1_000)));
    expect(inbox.bytes).toBe(10);
    expect(overflows).toBe(1);
    expect(inbox.closed).toBe(true);
    expect(await inbox.next()).toMatchObject({ data: "12345" });
    expect(await inbox.next()).toMatchObject({ data: "67890" });
    expect(await inbox.next()).toEqual({
      kind: "error",
      error: {
        code: "RESOURCE_EXHAUSTED",
        message: "the agent's reply exceeds 10 bytes",
        details: { limit_bytes: 10, reason: "ReplyTooLarge" },
      },
    });
  });

  it("keeps the first failure", async () => {
    const inbox = new RelayInbox();
    inbox.fail({ code: "DEADLINE_EXCEEDED", message: "late" });
    inbox.fail({ code: "INTERNAL", message: "other" });
    expect(await inbox.next()).toMatchObject({ kind: "error", error: { code: "DEADLINE_EXCEEDED" } });
  });
});
