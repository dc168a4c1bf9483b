import { describe, expect, it } from "vitest";
import { DnsLabel } from "../../contracts/session-spec.ts";
import { workspaceName } from "./workspace-name.ts";

describe("workspace names", () => {
  it("are stable for one request and differ between requests", () => {
    expect(workspaceName("alice", "main", "req-1")).toBe(workspaceName("alice", "main", "req-1"));
    expect(workspaceName("alice", "main", "req-1")).not.toBe(workspaceName("alice", "main", "req-2"));
    expect(workspaceName("alice", "main", "req-1")).toMatch(/^alice-main-[0-9a-f]{8}$/);
  });

  it("are DNS labels without '--', whatever the workstream", () => {
    for (const [agent, workstream] of [
      ["alice", ""],
      ["alice", "--odd--stream-"],
      ["a".repeat(63), "b".repeat(128)],
    ] as const) {
      const name = workspaceName(agent, workstream, "r");
      expect(DnsLabel.safeParse(name).success).toBe(true);
      expect(name).not.toContain("--");
    }
  });
});
