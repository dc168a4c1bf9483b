import { describe, expect, it } from "vitest";
import { RunnerCommand } from "./runner-protocol.ts";
import { CommandResultSchemas } from "./runner-results.ts";

describe("pause and unpause on the runner link", () => {
  it("are commands naming a workspace, and nothing else", () => {
    expect(RunnerCommand.parse({ kind: "pause", container_name: "w" })).toEqual({
      kind: "pause",
      container_name: "w",
    });
    expect(RunnerCommand.safeParse({ kind: "pause" }).success).toBe(false);
    expect(RunnerCommand.safeParse({ kind: "unpause", container_name: 3 }).success).toBe(false);
  });

  it("a pause result says frozen; the memory and what to evict come apart, from paused_memory", () => {
    expect(CommandResultSchemas.pause.parse({})).toEqual({ paused: true });
    expect(RunnerCommand.parse({ kind: "paused_memory", container_name: "w" })).toEqual({
      kind: "paused_memory",
      container_name: "w",
    });
    expect(CommandResultSchemas.paused_memory.parse({})).toEqual({ evict: [] });
    expect(CommandResultSchemas.paused_memory.parse({ memory_bytes: 1024, evict: ["a"] })).toEqual({
      memory_bytes: 1024,
      evict: ["a"],
    });
    expect(CommandResultSchemas.paused_memory.safeParse({ memory_bytes: -1 }).success).toBe(false);
    expect(CommandResultSchemas.unpause.parse({ unpaused: false })).toEqual({ unpaused: false });
  });
});
