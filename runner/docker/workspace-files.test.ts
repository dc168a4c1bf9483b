import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { DockerWorkspaceFiles } from "./workspace-files.ts";

/** A dockerode stand-in whose container is absent or stopped: nothing past `inspect` may be called. */
function engine(state: "absent" | "stopped") {
  const calls: string[] = [];
  const container = {
    inspect: async () => {
      calls.push("inspect");
      if (state === "absent") throw Object.assign(new Error("no such container"), { statusCode: 404 });
      return { State: { Running: false }, Config: { User: "65532:65532" } };
    },
    infoArchive: async () => calls.push("infoArchive"),
    getArchive: async () => calls.push("getArchive"),
    putArchive: async () => calls.push("putArchive"),
    exec: async () => calls.push("exec"),
  };
  return { docker: { getContainer: () => container } as unknown as Docker, calls };
}

describe("DockerWorkspaceFiles on a stopped session", () => {
  it("every operation is FAILED_PRECONDITION 'resume it first' and touches nothing", async () => {
    for (const state of ["absent", "stopped"] as const) {
      const { docker, calls } = engine(state);
      const files = new DockerWorkspaceFiles(docker);
      const upload = {
        size: 1,
        open: async function* () {
          yield Buffer.from("x");
        },
      };
      for (const op of [
        () => files.list("ws", ""),
        () => files.read("ws", "a.txt", "file", 10),
        () => files.read("ws", "", "archive", 10),
        () => files.write("ws", "a.txt", upload),
        () => files.delete("ws", "a.txt"),
      ])
        await expect(op()).rejects.toMatchObject({
          code: "FAILED_PRECONDITION",
          message: "workspace ws has no running container (the session is stopped); resume it first",
        });
      expect(new Set(calls)).toEqual(new Set(["inspect"]));
    }
  });
});
