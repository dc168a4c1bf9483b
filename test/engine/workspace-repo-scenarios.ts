/**
 * A workstream that is a repository (issue 18) on one engine, real parts: a server and a runner,
 * real Pulumi and engine, the test bed's git server (`scripts/testbed up git`: Debian's
 * `git http-backend` on the bridge) and its fixture repository. The workspace is seeded once, at
 * the first provision, within the session's own network rules (the repository must be in the
 * Agent's egress): on Docker in a short-lived container of the runner's git image, on Kubernetes
 * in the pod's `workspace` sidecar of it. A change made through the files API shows in the diff,
 * exactly, also after a stop and a resume (nothing cloned again), and so does one a real agent
 * (compass, its write tool called by the loopback model) makes, and one the agent committed and
 * pointed the checkout's seed ref at (issue 34 item 12).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { Engine, EngineProbe } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until } from "../support/system.ts";
import { sessionHostAddress, testbedHome } from "../support/testbed.ts";

export type RepoScenarioOptions = {
  engine: Engine;
  /** The engine's probe, made once the test bed is up. */
  probe: () => EngineProbe | Promise<EngineProbe>;
  /** Appended to every session name: the cluster and the repository's Pulumi.<stack>.yaml files are shared. */
  suffix?: string;
};

export function workspaceRepoScenarios(options: RepoScenarioOptions): void {
  const API = "agent-sessions.dev/v1alpha1";
  const NS = "/v1/namespaces/default";
  const SESSIONS = `${NS}/harnesssessions`;
  /** A session name of this run. */
  const n = (name: string) => `${name}${options.suffix ?? ""}`;

  type GitServer = { url: string; port: number; commits: { main: string; v1: string }; tokenFile: string };
  const recorded = JSON.parse(
    readFileSync(join(testbedHome, "state", "git-server.json"), "utf8"),
  ) as GitServer;
  /** Where sessions of this engine reach the host: the git server (relayed there on 1.35) and the model server. */
  const host = sessionHostAddress(options.engine);
  const git: GitServer = { ...recorded, url: `http://${host}:${recorded.port}` };

  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;

  async function raw(method: string, path: string, body?: string | Uint8Array) {
    const res = await fetch(`${system.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${system.adminToken}` },
      ...(body !== undefined ? { body } : {}),
    });
    return { status: res.status, text: await res.text(), type: res.headers.get("content-type") };
  }

  function agent(
    name: string,
    egress: { cidr: string; port: number }[],
    credentials: Json[] = [],
    runtimeRef = "reference",
  ) {
    return system.call("PUT", `${NS}/agents/${name}`, {
      apiVersion: API,
      kind: "Agent",
      metadata: { name },
      spec: {
        runtimeRef,
        credentials: [
          { name: "MODEL_API_KEY", value: `sk-e2e-${randomBytes(8).toString("hex")}` },
          ...credentials,
        ],
        model: { baseUrl: model.url, name: "tiny" },
        egress,
      },
    });
  }

  function session(name: string, repo: Json, agentRef = "coder", runtimeRef = "reference") {
    return system.call("PUT", `${SESSIONS}/${name}`, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: {
        agentRef,
        runtimeRef,
        desiredState: "running",
        idleTimeout: "10m",
        workspace: { repo },
      },
    });
  }

  function phase(name: string, wanted: string, timeoutMs = 180_000): Promise<Json> {
    return until(
      `${name} ${wanted}`,
      async () => {
        const s = await system.call("GET", `${SESSIONS}/${name}`);
        if (s.body.status?.phase === wanted) return s.body;
        // Thrown, not undefined: a wait that times out says where the session is.
        throw new Error(`phase ${s.body.status?.phase}: ${JSON.stringify(s.body.status?.conditions ?? [])}`);
      },
      timeoutMs,
    );
  }

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    system = new System();
    if (options.engine === "docker") await system.startEmbedded();
    else {
      await system.startServer();
      await system.startRunner(["--engine", options.engine]);
    }
    const modelRule = { cidr: `${model.host}/32`, port: model.port };
    const token = readFileSync(git.tokenFile, "utf8").trim();
    expect(
      (
        await agent(
          "coder",
          [modelRule, { cidr: `${host}/32`, port: git.port }],
          [{ name: "GIT_TOKEN", value: token }],
        )
      ).status,
    ).toBe(201);
    expect((await agent("offline", [modelRule])).status).toBe(201);
    // A real agent (compass: its own read/write/edit/bash tools) on the same repository.
    const compass = await agent(
      "compass-coder",
      [modelRule, { cidr: `${host}/32`, port: git.port }],
      [],
      "compass",
    );
    expect(compass.status).toBe(201);
  }, 120_000);

  afterAll(async () => {
    probe?.close(); // only the pod watch: the probe's other checks still answer
    // At once: each DELETE waits for its stack's destroy.
    await Promise.all(
      ["seeded", "agent-work", "bad-repo", "bad-ref", "private"]
        .map(n)
        .map((name) => system?.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined)),
    );
    await system?.stop();
    await model?.close();
  });

  describe(`a workspace seeded from a repository (${options.engine})`, () => {
    const DIFF = `${SESSIONS}/${n("seeded")}/workspace:diff`;
    let container = "";
    let diffAfterUpload = "";

    it("starts with the repository checked out at the ref, nothing changed yet", async () => {
      expect((await session(n("seeded"), { url: `${git.url}/fixture.git`, ref: "v1" })).status).toBe(201);
      const ready = await phase(n("seeded"), "Ready");
      container = ready.status.containerName;
      // The checkout at v1 (the first commit), in the agent's own view and through the files API.
      expect(await probe.readFile(container, "/workspace/fixture/src/hello.txt")).toBe("hello\n");
      expect(
        (await raw("GET", `${SESSIONS}/${n("seeded")}/workspace/files/fixture/README.md`)).text,
      ).toContain("# fixture");
      expect((await raw("GET", `${SESSIONS}/${n("seeded")}/workspace/files/fixture/NOTES.md`)).status).toBe(
        404,
      );
      const empty = await raw("GET", DIFF);
      expect(empty.status).toBe(200);
      expect(empty.type).toMatch(/^text\/x-diff/);
      expect(empty.text).toBe("");
    });

    it("the diff shows exactly the change made in the workspace: an edited file and a new one", async () => {
      expect(
        (
          await raw(
            "PUT",
            `${SESSIONS}/${n("seeded")}/workspace/files/fixture/src/hello.txt`,
            "hello\nchanged\n",
          )
        ).status,
      ).toBe(201);
      expect(
        (await raw("PUT", `${SESSIONS}/${n("seeded")}/workspace/files/fixture/new.txt`, "brand new\n"))
          .status,
      ).toBe(201);
      const diff = await raw("GET", DIFF);
      expect(diff.status).toBe(200);
      expect(diff.text.match(/^diff --git .*$/gm)).toEqual([
        "diff --git a/new.txt b/new.txt",
        "diff --git a/src/hello.txt b/src/hello.txt",
      ]);
      expect(diff.text).toContain("new file mode 100644");
      expect(diff.text).toContain("+brand new\n");
      expect(diff.text).toContain(" hello\n+changed\n");
      expect(diff.text.match(/^[+-][^+-].*$/gm)).toEqual(["+brand new", "+changed"]);
      diffAfterUpload = diff.text;
      // The RPC workspace route and the CLI give the same diff.
      expect((await raw("GET", `/v1/workspaces/${container}/workspace:diff`)).text).toBe(diffAfterUpload);
      const cli = await system.runCli([
        "diff",
        n("seeded"),
        "--server",
        system.url,
        "--token",
        system.adminToken,
      ]);
      expect(cli.code, cli.stderr).toBe(0);
      expect(cli.stdout).toBe(diffAfterUpload);
    });

    it("survives stop and resume: nothing cloned again, the change and its diff kept", async () => {
      expect(
        (await system.call("PATCH", `${SESSIONS}/${n("seeded")}`, { spec: { desiredState: "stopped" } }))
          .status,
      ).toBe(200);
      await phase(n("seeded"), "Stopped", 120_000);
      await until(
        "workload gone, volume kept",
        () => probe.stoppedKeepingVolume(container),
        probe.stoppedWithinMs,
      );
      const stoppedDiff = await raw("GET", DIFF);
      if (options.engine === "docker") {
        // Only the volume is needed: a stopped session diffs too.
        expect(stoppedDiff.text).toBe(diffAfterUpload);
      } else {
        // The diff runs in the pod's workspace sidecar, and a stopped session has no pod.
        expect(stoppedDiff.status).toBe(412);
        expect(JSON.parse(stoppedDiff.text)).toMatchObject({ code: "FAILED_PRECONDITION" });
        expect(JSON.parse(stoppedDiff.text).message).toContain("resume it first");
      }
      expect(
        (await system.call("PATCH", `${SESSIONS}/${n("seeded")}`, { spec: { desiredState: "running" } }))
          .status,
      ).toBe(200);
      await phase(n("seeded"), "Ready");
      expect(await probe.readFile(container, "/workspace/fixture/src/hello.txt")).toBe("hello\nchanged\n");
      expect((await raw("GET", DIFF)).text).toBe(diffAfterUpload);
    });

    it("a change the agent committed, with the checkout's seed ref moved to that commit, still shows in the diff (issue 34 item 12)", async () => {
      const FILES = `${SESSIONS}/${n("seeded")}/workspace/files/fixture`;
      const readme = await raw("GET", `${FILES}/README.md`);
      expect(readme.status).toBe(200);
      expect((await raw("PUT", `${FILES}/README.md`, `${readme.text}malicious\n`)).status).toBe(201);
      // What an agent does with its write tool alone: a commit of everything it changed, its
      // objects written into .git/objects, and refs/agent-sessions/seed pointed at it. Made here
      // with the host's git on a copy of the checkout, then written through the files API.
      const work = mkdtempSync(join(tmpdir(), "seed-ref-"));
      try {
        const tar = await fetch(`${system.url}${SESSIONS}/${n("seeded")}/workspace:archive?path=fixture`, {
          headers: { authorization: `Bearer ${system.adminToken}` },
        });
        expect(tar.status).toBe(200);
        writeFileSync(join(work, "fixture.tar"), Buffer.from(await tar.arrayBuffer()));
        execFileSync("tar", ["--no-same-owner", "-xf", "fixture.tar"], { cwd: work });
        const copy = join(work, "fixture");
        const objects = join(copy, ".git", "objects");
        const looseObjects = () =>
          new Set(
            readdirSync(objects)
              .filter((d) => /^[0-9a-f]{2}$/.test(d))
              .flatMap((d) => readdirSync(join(objects, d)).map((f) => `${d}/${f}`)),
          );
        const before = looseObjects();
        const hostGit = (...args: string[]) =>
          execFileSync("git", ["-c", "user.name=agent", "-c", "user.email=agent@example", ...args], {
            cwd: copy,
            env: { PATH: process.env.PATH, HOME: work, GIT_CONFIG_NOSYSTEM: "1" },
            encoding: "utf8",
          }).trim();
        hostGit("add", "-A");
        hostGit("commit", "-q", "-m", "nothing to see");
        const commit = hostGit("rev-parse", "HEAD");
        for (const object of looseObjects())
          if (!before.has(object))
            expect(
              (await raw("PUT", `${FILES}/.git/objects/${object}`, readFileSync(join(objects, object))))
                .status,
            ).toBe(201);
        expect((await raw("PUT", `${FILES}/.git/refs/agent-sessions/seed`, `${commit}\n`)).status).toBe(201);
        expect((await raw("GET", `${FILES}/.git/refs/agent-sessions/seed`)).text).toBe(`${commit}\n`);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
      const diff = await raw("GET", DIFF);
      expect(diff.status).toBe(200);
      expect(diff.text.match(/^diff --git .*$/gm)).toEqual([
        "diff --git a/README.md b/README.md",
        "diff --git a/new.txt b/new.txt",
        "diff --git a/src/hello.txt b/src/hello.txt",
      ]);
      expect(diff.text.match(/^[+-][^+-].*$/gm)).toEqual(["+malicious", "+brand new", "+changed"]);
    });

    it("a real agent's tool call is a diffed change: compass writes a file with its write tool, the diff shows exactly it", async () => {
      const created = await session(
        n("agent-work"),
        { url: `${git.url}/fixture.git`, ref: "v1" },
        "compass-coder",
        "compass",
      );
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const ready = await phase(n("agent-work"), "Ready");
      const calls = model.toolCalls.length;
      const reply = await system.call("POST", `${SESSIONS}/${n("agent-work")}/requests`, {
        input: "write file fixture/agent-note.txt with content written-by-the-agent",
        id: "tool-1",
      });
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      expect(reply.body).toMatchObject({ outcome: "succeeded", output: "I wrote fixture/agent-note.txt." });
      // The model asked for compass's own write tool, and the agent ran it inside the workspace.
      expect(model.toolCalls.slice(calls).map((c) => c.name)).toEqual(["write"]);
      expect(await probe.readFile(ready.status.containerName, "/workspace/fixture/agent-note.txt")).toBe(
        "written-by-the-agent",
      );
      const diff = await raw("GET", `${SESSIONS}/${n("agent-work")}/workspace:diff`);
      expect(diff.status).toBe(200);
      expect(diff.text.match(/^diff --git .*$/gm)).toEqual(["diff --git a/agent-note.txt b/agent-note.txt"]);
      expect(diff.text).toContain("new file mode 100644");
      expect(diff.text.match(/^[+-][^+-].*$/gm)).toEqual(["+written-by-the-agent"]);
      expect((await system.call("DELETE", `${SESSIONS}/${n("agent-work")}`)).status).toBe(200);
    });

    it("a repository that cannot be cloned, or a missing ref: Failed, ProvisionFailed, with git's error", async () => {
      expect((await session(n("bad-repo"), { url: `${git.url}/no-such-repo.git` })).status).toBe(201);
      expect(
        (await session(n("bad-ref"), { url: `${git.url}/fixture.git`, ref: "no-such-ref" })).status,
      ).toBe(201);
      const badRepo = (await phase(n("bad-repo"), "Failed")).status.conditions[0];
      expect(badRepo).toMatchObject({ type: "Ready", status: "False", reason: "ProvisionFailed" });
      expect(badRepo.message).toContain(`${git.url}/no-such-repo.git`);
      expect(badRepo.message).toMatch(/not found/);
      const badRef = (await phase(n("bad-ref"), "Failed")).status.conditions[0];
      expect(badRef).toMatchObject({ type: "Ready", status: "False", reason: "ProvisionFailed" });
      expect(badRef.message).toContain("couldn't find remote ref no-such-ref");
      // Nothing was seeded: there is nothing to diff.
      const none = await raw("GET", `${SESSIONS}/${n("bad-ref")}/workspace:diff`);
      expect(none.status).toBe(412);
      expect(JSON.parse(none.text)).toMatchObject({ code: "FAILED_PRECONDITION" });
    });

    it("a private repository is cloned with the Agent's credential, which shows nowhere", async () => {
      const token = readFileSync(git.tokenFile, "utf8").trim();
      expect(
        (await session(n("private"), { url: `${git.url}/private-fixture.git`, credential: "GIT_TOKEN" }))
          .status,
      ).toBe(201);
      const ready = await phase(n("private"), "Ready");
      // The default branch (main: the second commit), under the URL's own name.
      expect(await probe.readFile(ready.status.containerName, "/workspace/private-fixture/NOTES.md")).toBe(
        "notes of the second commit\n",
      );
      expect(JSON.stringify(ready)).not.toContain(token);
      expect(JSON.stringify((await system.call("GET", `${NS}/agents/coder`)).body)).not.toContain(token);
    });

    it("a repository outside the Agent's egress is refused before anything is provisioned", async () => {
      const refused = await system.call("POST", "/v1/rpc/ProvisionAgentWorkspace", {
        agent_ref: "offline",
        workstream: { name: "repo", repo: { url: `${git.url}/fixture.git` } },
      });
      expect(refused.body).toMatchObject({
        code: "FAILED_PRECONDITION",
        details: { reason: "RepoNotInEgress" },
      });
      expect(refused.body.message).toContain(`repository ${host}:${git.port} is not in the Agent's egress`);
      const listed = await system.call("POST", "/v1/rpc/GetAgentStatus", {});
      expect(JSON.stringify(listed.body)).not.toContain("offline");
      const withUser = await system.call("POST", "/v1/rpc/ProvisionAgentWorkspace", {
        agent_ref: "coder",
        workstream: {
          name: "repo",
          repo: { url: `http://user:secret@${host}:${git.port}/fixture.git` },
        },
      });
      expect(withUser.body.code).toBe("INVALID_ARGUMENT");
      expect(JSON.stringify(withUser.body)).not.toContain("secret");
    });
  });
}
