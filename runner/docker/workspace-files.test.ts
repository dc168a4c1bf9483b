import { PassThrough, Readable } from "node:stream";
import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { TAR_END, tarHeader, tarPadding } from "./tar.ts";
import { EXIT } from "../engine/workspace-files-script.ts";
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

/**
 * The swap race (issue 34 item 17) as the engine showed it: the stat says `dir` is a directory and
 * `dir/notes.txt` a regular file, but by the time of the archive GET the agent swapped `dir` for a
 * link to /etc, and the engine (which follows intermediate symlinks in the container's root) serves
 * the container's /etc/passwd. A read must not go through that GET: it runs the files script in a
 * container of the git image that mounts the session volume only.
 */
function racedEngine() {
  const calls: string[] = [];
  const created: Docker.ContainerCreateOptions[] = [];
  const stat = (mode: number, size: number) => ({
    headers: {
      "x-docker-container-path-stat": Buffer.from(
        JSON.stringify({ name: "x", size, mode, mtime: "", linkTarget: "" }),
      ).toString("base64"),
    },
  });
  const workload = {
    inspect: async () => ({ State: { Running: true }, Config: { User: "65532:65532" } }),
    infoArchive: async ({ path }: { path: string }) =>
      path.endsWith(".txt") ? stat(0o644, 6) : stat(2 ** 31 + 0o755, 4096),
    getArchive: async () => {
      calls.push("getArchive");
      const body = Buffer.from("root:x:0:0:root:/root:/bin/sh\n");
      return Readable.from([
        tarHeader({
          name: "notes.txt",
          type: "file",
          size: body.length,
          mode: 0o644,
          uid: 0,
          gid: 0,
          mtime: 0,
        }),
        body,
        tarPadding(body.length),
        TAR_END,
      ]);
    },
  };
  const helper = {
    attach: async () => new PassThrough(),
    start: async () => calls.push("start"),
    wait: async () => ({ StatusCode: 0 }),
    remove: async () => calls.push("remove"),
  };
  const docker = {
    getContainer: () => workload,
    getImage: () => ({ inspect: async () => ({}) }),
    createContainer: async (options: Docker.ContainerCreateOptions) => {
      created.push(options);
      return helper;
    },
    modem: {
      demuxStream: (attached: PassThrough, stdout: PassThrough) => {
        stdout.write("yours\n");
        attached.resume();
        setImmediate(() => attached.end());
      },
    },
  } as unknown as Docker;
  return { docker, calls, created };
}

describe("DockerWorkspaceFiles read (issue 34 item 17)", () => {
  it("never serves the engine's archive GET of a path a swap can redirect; the script reads inside the volume", async () => {
    const { docker, calls, created } = racedEngine();
    const files = new DockerWorkspaceFiles(docker, "git@sha256:abc");
    const chunks: Buffer[] = [];
    for await (const chunk of await files.read("ws", "dir/notes.txt", "file", 1000)) chunks.push(chunk);
    expect(Buffer.concat(chunks).toString()).toBe("yours\n");
    expect(calls).not.toContain("getArchive");
    // Only the session volume is mounted (read-only), so even a path out of it finds nothing of the workload.
    const mounts = created[0]?.HostConfig?.Mounts ?? [];
    expect(mounts.filter((m) => m.Type !== "tmpfs")).toEqual([
      { Type: "volume", Source: "ws-workspace", Target: "/workspace", ReadOnly: true },
    ]);
    expect(created[0]?.HostConfig?.NetworkMode).toBe("none");
  });
});

/** A running workload whose exec records the command and its stdin and exits with `exitCode`. */
function execEngine(exitCode: number) {
  const calls: string[] = [];
  const commands: string[][] = [];
  const stdin: Buffer[] = [];
  const workload = {
    inspect: async () => ({ State: { Running: true }, Config: { User: "65532:65532" } }),
    infoArchive: async () => calls.push("infoArchive"),
    getArchive: async () => calls.push("getArchive"),
    putArchive: async () => calls.push("putArchive"),
    exec: async ({ Cmd }: { Cmd: string[] }) => {
      commands.push(Cmd);
      const stream = new PassThrough();
      stream.on("data", (chunk: Buffer) => stdin.push(chunk));
      return {
        start: async () => stream,
        inspect: async () => ({ ExitCode: exitCode, Running: false }),
        // The script ends once it read what it was told to.
        ended: () => stream.emit("end"),
      };
    },
  };
  const docker = {
    getContainer: () => workload,
    modem: {
      demuxStream: (stream: PassThrough) => {
        setTimeout(() => stream.emit("end"), 20);
      },
    },
  } as unknown as Docker;
  return { docker, calls, commands, stdin };
}

describe("DockerWorkspaceFiles write and delete (issue 34 item 17)", () => {
  const upload = {
    size: 5,
    open: async function* () {
      yield Buffer.from("hello");
    },
  };

  it("run the files script in the workload container, the upload on its stdin; never the archive endpoints", async () => {
    const { docker, calls, commands, stdin } = execEngine(0);
    const files = new DockerWorkspaceFiles(docker, "git@sha256:abc");
    await files.write("ws", "src/a.txt", upload);
    expect(await files.delete("ws", "src/a.txt")).toBe(true);
    expect(commands.map((c) => [c[0], ...c.slice(3)])).toEqual([
      ["/bin/sh", "sh", "write", "src/a.txt", "5"],
      ["/bin/sh", "sh", "delete", "src/a.txt"],
    ]);
    expect(commands[0]?.[2]).toContain("mv -f -T");
    expect(Buffer.concat(stdin).toString()).toBe("hello");
    expect(calls).toEqual([]);
  });

  it("a path through a symlink (the script's refusal) is INVALID_ARGUMENT", async () => {
    const { docker } = execEngine(EXIT.symlink);
    const files = new DockerWorkspaceFiles(docker);
    for (const op of [() => files.write("ws", "link/a.txt", upload), () => files.delete("ws", "link/a.txt")])
      await expect(op()).rejects.toMatchObject({
        code: "INVALID_ARGUMENT",
        message: expect.stringContaining("/workspace/link/a.txt goes through a symlink"),
      });
  });

  it("a staging file shorter than announced ends the exec instead of leaving the script waiting", async () => {
    const { docker } = execEngine(EXIT.short);
    const files = new DockerWorkspaceFiles(docker);
    const short = {
      size: 5,
      open: async function* () {
        yield Buffer.from("hel");
      },
    };
    await expect(files.write("ws", "a.txt", short)).rejects.toMatchObject({
      code: "INTERNAL",
      message: "upload staging changed size (3 of 5)",
    });
  });

  it("without a git image, lists and reads are FAILED_PRECONDITION and never reach the archive GET", async () => {
    const { docker, calls } = execEngine(0);
    const files = new DockerWorkspaceFiles(docker);
    for (const op of [
      () => files.list("ws", ""),
      () => files.read("ws", "a.txt", "file", 10),
      () => files.read("ws", "", "archive", 10),
    ])
      await expect(op()).rejects.toMatchObject({
        code: "FAILED_PRECONDITION",
        message: expect.stringContaining("no git image (AGENT_SESSIONS_GIT_IMAGE)"),
      });
    expect(calls).toEqual([]);
  });
});
