/**
 * The workspace files API (issue 18) on one engine, real parts: a server and a runner (on Docker
 * `serve` with its embedded runner), real Pulumi and engine, one reference session. Files go in
 * and out through the proxy only: on Docker the runner uses the Engine API's archive endpoints,
 * on Kubernetes it execs into the pod's `workspace` sidecar. What the agent sees is read in its
 * own container. Escapes are refused with 400 and change nothing. (A stopped session's
 * FAILED_PRECONDITION is covered by runner/docker/workspace-files.test.ts and workspace-repo-scenarios.ts.)
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { Engine, EngineProbe } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until } from "../support/system.ts";

export type ScenarioOptions = {
  engine: Engine;
  /** The engine's probe, made once the test bed is up. */
  probe: () => EngineProbe | Promise<EngineProbe>;
  /** Appended to every session name: the cluster and the repository's Pulumi.<stack>.yaml files are shared. */
  suffix?: string;
  /**
   * A writable directory outside /workspace where the files API's commands run (Docker: the
   * workload's /tmp; Kubernetes: the sidecar's /scratch), and a way to run sh there: the swap
   * race's links point at it, and it is where a write that escaped would land.
   */
  outside: { dir: string; sh: (container: string, script: string) => Promise<string> };
};

export function workspaceFilesScenarios(options: ScenarioOptions): void {
  const API = "agent-sessions.dev/v1alpha1";
  const NS = "/v1/namespaces/default";
  const NAME = `files${options.suffix ?? ""}`;
  const FILES = `${NS}/harnesssessions/${NAME}/workspace`;
  /** The server's limit in this file: 3 MiB (so one upload spans several runner-link pieces and another exceeds it). */
  const MAX_BYTES = 3 * 1024 * 1024;

  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  let container = "";

  async function raw(method: string, path: string, body?: Uint8Array | string) {
    const res = await fetch(`${system.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${system.adminToken}` },
      ...(body !== undefined ? { body } : {}),
    });
    return {
      status: res.status,
      bytes: Buffer.from(await res.arrayBuffer()),
      type: res.headers.get("content-type"),
    };
  }
  const json = (r: { bytes: Buffer }): Json => JSON.parse(r.bytes.toString("utf8"));

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(8).toString("hex")}`;
    system = new System(undefined, { AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES: String(MAX_BYTES) });
    if (options.engine === "docker") await system.startEmbedded();
    else {
      await system.startServer();
      await system.startRunner(["--engine", options.engine]);
    }
    const agent = await system.call("PUT", `${NS}/agents/coder`, {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "coder" },
      spec: {
        runtimeRef: "reference",
        credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "E2E_MODEL_KEY" } }],
        model: { baseUrl: model.url, name: "tiny" },
        egress: [{ cidr: `${model.host}/32`, port: model.port }],
      },
    });
    expect(agent.status).toBe(201);
    const created = await system.call("PUT", `${NS}/harnesssessions/${NAME}`, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name: NAME },
      spec: { agentRef: "coder", runtimeRef: "reference", desiredState: "running", idleTimeout: "10m" },
    });
    expect(created.status).toBe(201);
    const ready = await until(
      `${NAME} Ready`,
      async () => {
        const s = await system.call("GET", `${NS}/harnesssessions/${NAME}`);
        return s.body.status?.phase === "Ready" ? s.body : undefined;
      },
      180_000,
    );
    container = ready.status.containerName;
  }, 240_000);

  afterAll(async () => {
    probe?.close(); // only the pod watch: the probe's other checks still answer
    await system?.call("DELETE", `${NS}/harnesssessions/${NAME}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`workspace files through the proxy (${options.engine})`, () => {
    const big = randomBytes(2 * 1024 * 1024 + 12_345);

    it("an upload lands in the agent's /workspace, parent directories created, and downloads byte for byte", async () => {
      const hello = await raw("PUT", `${FILES}/files/src/notes/hello.txt`, "hello from the proxy\n");
      expect(hello.status).toBe(201);
      expect(json(hello)).toEqual({ path: "src/notes/hello.txt", size: 21 });
      const bin = await raw("PUT", `${FILES}/files/src/big.bin`, big);
      expect(bin.status).toBe(201);
      expect(json(bin).size).toBe(big.length);
      // The agent's own view, read in the container.
      expect(await probe.readFile(container, "/workspace/src/notes/hello.txt")).toBe(
        "hello from the proxy\n",
      );
      expect(
        (await probe.exec(container, ["busybox", "stat", "-c", "%u %s", "/workspace/src/big.bin"])).trim(),
      ).toBe(`65532 ${big.length}`);
      const down = await raw("GET", `${FILES}/files/src/big.bin`);
      expect(down.status).toBe(200);
      expect(down.bytes.equals(big)).toBe(true);
      // The RPC workspace route reaches the same files.
      const viaRpc = await raw("GET", `/v1/workspaces/${container}/workspace/files/src/notes/hello.txt`);
      expect(viaRpc.bytes.toString()).toBe("hello from the proxy\n");
    });

    it("a listing gives name, type, size and mtime of one directory level", async () => {
      const listed = await raw("GET", `${FILES}/files?path=src`);
      expect(listed.status).toBe(200);
      const body = json(listed);
      expect(body.path).toBe("src");
      expect(body.entries).toEqual([
        { name: "big.bin", type: "file", size: big.length, mtime: expect.any(String) },
        { name: "notes", type: "dir", size: 0, mtime: expect.any(String) },
      ]);
      expect(Date.now() - Date.parse(body.entries[0].mtime)).toBeLessThan(10 * 60_000);
    });

    it("an archive of a directory is a tar holding what was uploaded", async () => {
      const tar = await raw("GET", `${FILES}:archive?path=src`);
      expect(tar.status).toBe(200);
      expect(tar.type).toBe("application/x-tar");
      const dir = mkdtempSync(join(tmpdir(), "ws-archive-"));
      writeFileSync(join(dir, "src.tar"), tar.bytes);
      execFileSync("tar", ["-xf", "src.tar"], { cwd: dir });
      expect(readFileSync(join(dir, "src/notes/hello.txt"), "utf8")).toBe("hello from the proxy\n");
      expect(readFileSync(join(dir, "src/big.bin")).equals(big)).toBe(true);
    });

    it("paths leaving /workspace are 400 INVALID_ARGUMENT and touch nothing", async () => {
      await probe.exec(container, ["busybox", "ln", "-s", "/etc", "/workspace/etc-link"]);
      const attempts: [string, string][] = [
        ["GET", `${FILES}/files/..%2F..%2Fetc%2Fpasswd`],
        ["GET", `${FILES}/files?path=..`],
        ["GET", `${FILES}:archive?path=/etc`],
        ["GET", `${FILES}/files/etc-link/passwd`],
        ["GET", `${FILES}/files?path=etc-link`],
        ["GET", `${FILES}:archive?path=etc-link`],
        ["PUT", `${FILES}/files/etc-link/evil`],
        ["PUT", `${FILES}/files/src%2F..%2F..%2Ftmp%2Fevil`],
        ["DELETE", `${FILES}/files/etc-link/hostname`],
      ];
      for (const [method, path] of attempts) {
        const r = await raw(method, path, method === "PUT" ? "x" : undefined);
        expect({ method, path, status: r.status, code: json(r).code }).toEqual({
          method,
          path,
          status: 400,
          code: "INVALID_ARGUMENT",
        });
      }
      expect(await probe.exec(container, ["ls", "/etc"])).not.toContain("evil");
      expect(await probe.exec(container, ["ls", "/tmp"])).not.toContain("evil");
      // The link itself is the workspace's own entry: listed as a symlink, deletable.
      const root = json(await raw("GET", `${FILES}/files`));
      expect(root.entries).toContainEqual(expect.objectContaining({ name: "etc-link", type: "symlink" }));
      expect((await raw("DELETE", `${FILES}/files/etc-link`)).status).toBe(200);
      expect(await probe.exec(container, ["ls", "/etc"])).toContain("passwd");
    });

    it("a write or delete racing an agent that swaps a directory for a symlink never lands outside /workspace (issue 34 item 17)", async () => {
      const out = options.outside.dir;
      await options.outside.sh(container, `: > ${out}/victim.txt && rm -f ${out}/evil-*`);
      // The agent's side: race/dir flips between a real directory and a link to `out` as fast as
      // it can, until the test drops race/stop.
      await probe.exec(container, [
        "sh",
        "-c",
        `rm -rf /workspace/race && mkdir -p /workspace/race/real && cd /workspace/race && (while [ ! -e stop ]; do rm -f dir; mv real dir; : > dir/victim.txt; mv dir real; ln -s ${out} dir; done) </dev/null >/dev/null 2>&1 &`,
      ]);
      const statuses: number[] = [];
      const failures: string[] = [];
      const attempt = async (method: string, path: string, body?: string) => {
        const r = await raw(method, path, body);
        statuses.push(r.status);
        if (![200, 201, 400, 404].includes(r.status))
          failures.push(`${method} ${r.status} ${r.bytes.toString()}`);
      };
      try {
        for (let i = 0; i < 60; i++) {
          await attempt("PUT", `${FILES}/files/race/dir/evil-${i}`, "evil\n");
          await attempt("DELETE", `${FILES}/files/race/dir/victim.txt`);
        }
      } finally {
        await probe.exec(container, ["sh", "-c", ": > /workspace/race/stop"]);
      }
      const outside = (await options.outside.sh(container, `ls -A ${out}`)).split(/\s+/);
      // Some requests won the race and acted in the real directory: the race ran.
      expect(statuses).toContain(201);
      expect({
        escaped: outside.filter((name) => name.startsWith("evil-")),
        victim: outside.includes("victim.txt"),
      }).toEqual({
        escaped: [],
        victim: true,
      });
      // Refusals are the files API's own 400 (a symlink) or 404 (missing just then), never a 500.
      expect(failures).toEqual([]);
    }, 180_000);

    it("an upload over the limit is 413 RESOURCE_EXHAUSTED and leaves no file", async () => {
      const r = await raw("PUT", `${FILES}/files/too-big.bin`, randomBytes(MAX_BYTES + 1));
      expect(r.status).toBe(413);
      expect(json(r)).toMatchObject({ code: "RESOURCE_EXHAUSTED", details: { limit_bytes: MAX_BYTES } });
      expect(await probe.exec(container, ["ls", "/workspace"])).not.toContain("too-big");
    });

    it("agent-sessions cp copies a file in and back out through the same API", async () => {
      const dir = mkdtempSync(join(tmpdir(), "ws-cp-"));
      const local = join(dir, "in.bin");
      const content = randomBytes(300_000);
      writeFileSync(local, content);
      const flags = ["--server", system.url, "--token", system.adminToken];
      const up = await system.runCli(["cp", local, `${NAME}:cp/in.bin`, ...flags]);
      expect(up.code, up.stderr).toBe(0);
      expect(
        (await probe.exec(container, ["busybox", "stat", "-c", "%s", "/workspace/cp/in.bin"])).trim(),
      ).toBe(String(content.length));
      const down = await system.runCli(["cp", `${NAME}:cp/in.bin`, join(dir, "out.bin"), ...flags]);
      expect(down.code, down.stderr).toBe(0);
      expect(readFileSync(join(dir, "out.bin")).equals(content)).toBe(true);
      const outside = await system.runCli(["cp", `${NAME}:../etc/passwd`, join(dir, "x"), ...flags]);
      // The server refuses the path (INVALID_ARGUMENT): exit 6, invalid input.
      expect(outside.code).toBe(6);
      expect(outside.stderr).toContain("leaves /workspace");
    });

    it("a delete removes a file; reading it then is 404", async () => {
      const del = await raw("DELETE", `${FILES}/files/src/notes/hello.txt`);
      expect(del.status).toBe(200);
      expect(json(del)).toEqual({ path: "src/notes/hello.txt", deleted: true });
      expect((await raw("GET", `${FILES}/files/src/notes/hello.txt`)).status).toBe(404);
      expect((await raw("DELETE", `${FILES}/files/src/notes/hello.txt`)).status).toBe(404);
    });
  });
}
