/**
 * The `agent-sessions` CLI as people and scripts run it: the real binary against a real server
 * (`serve --no-runner`) and a real runner process, real dockerd and Pulumi, the reference image
 * answering through the proxy against the loopback model server. Exit codes are part of the
 * interface: 0 ok, 1 server-side failure, 2 usage, 3 not found, 4 precondition/conflict,
 * 5 permission denied/unauthenticated, 6 invalid (refused by the server), 7 unavailable.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { BRIDGE_IP, type Json, System, until, writeLogTails } from "../support/system.ts";
import { referenceImage, repoRoot } from "../support/testbed.ts";

const bin = join(repoRoot, "bin", "agent-sessions");
let system: System;
let model: ModelServer;
let manifests = "";

type Run = { code: number | null; stdout: string; stderr: string };

/** Runs the CLI against the test's server; `env` adds to (or with undefined removes from) its environment. */
function cli(
  args: string[],
  options: { input?: string; env?: Record<string, string | undefined> } = {},
): Promise<Run> {
  const env: Record<string, string | undefined> = {
    ...process.env,
    AGENT_SESSIONS_SERVER_URL: system.url,
    AGENT_SESSIONS_TOKEN: system.adminToken,
    ...options.env,
  };
  const child = spawn(bin, args, { env: env as NodeJS.ProcessEnv, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  child.stdin.end(options.input ?? "");
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

/** A long-running CLI (events --follow): its output so far, and a Ctrl-C. */
function background(args: string[], env: Record<string, string> = {}) {
  const child: ChildProcess = spawn(bin, args, {
    env: {
      ...process.env,
      AGENT_SESSIONS_SERVER_URL: system.url,
      AGENT_SESSIONS_TOKEN: system.adminToken,
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const out = { stdout: "", stderr: "" };
  child.stdout?.on("data", (d: Buffer) => {
    out.stdout += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    out.stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
  return {
    out,
    lines: () => out.stdout.split("\n").filter(Boolean),
    interrupt: async () => {
      child.kill("SIGINT");
      return exited;
    },
  };
}

const MANIFESTS = (
  modelUrl: string,
  modelPort: number,
) => `# An Agent bound to the reference runtime, and a session of it.
apiVersion: agent-sessions.dev/v1alpha1
kind: Agent
metadata:
  name: cli-agent
spec:
  runtimeRef: reference
  credentials:
    - name: MODEL_API_KEY
      value: sk-cli-literal-secret
  model:
    baseUrl: ${modelUrl}
    name: tiny
  egress:
    - cidr: ${BRIDGE_IP}/32
      port: ${modelPort}
---
apiVersion: agent-sessions.dev/v1alpha1
kind: HarnessSession
metadata:
  name: cli-chat
spec:
  agentRef: cli-agent
  runtimeRef: reference
  idleTimeout: 30m
---
`;

beforeAll(async () => {
  model = await startModelServer(BRIDGE_IP, 0);
  system = new System();
  await system.startServer();
  await system.startRunner();
  manifests = join(system.dataDir, "manifests.yaml");
  writeFileSync(manifests, MANIFESTS(model.url, model.port));
});

afterEach((context) => {
  if (context.task.result?.state !== "fail") return;
  writeLogTails(system);
});

afterAll(async () => {
  await system?.call("DELETE", "/v1/namespaces/default/harnesssessions/cli-chat").catch(() => undefined);
  await system?.stop();
  await model?.close();
});

describe("agent-sessions CLI: resources", () => {
  it("apply -f puts every document of a multi-document file, then says unchanged (the same manifests again)", async () => {
    const first = await cli(["apply", "-f", manifests]);
    expect(first).toMatchObject({ code: 0, stderr: "" });
    expect(first.stdout).toBe("agent/cli-agent created\nharnesssession/cli-chat created\n");
    const again = await cli(["apply", "-f", "-", "--json"], { input: MANIFESTS(model.url, model.port) });
    expect(again.code).toBe(0);
    expect(
      again.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Json),
    ).toEqual([
      { kind: "Agent", namespace: "default", name: "cli-agent", action: "unchanged" },
      { kind: "HarnessSession", namespace: "default", name: "cli-chat", action: "unchanged" },
    ]);
  });

  it("get lists and shows each kind as a table, JSON and YAML", async () => {
    const runtimes = await cli(["get", "art"]);
    expect(runtimes.code).toBe(0);
    // Every runtime the server ships is listed (pi too when its image is built), by name.
    expect(runtimes.stdout).toMatch(/^NAME\s+CONTRACT\s+STREAMING\s+APPROVED\s+IMAGE\s+AGE\n/);
    expect(runtimes.stdout).toMatch(/^reference\s+v1alpha2\s+true\s+true\s/m);
    const agents = await cli(["get", "agents"]);
    expect(agents.stdout).toMatch(/cli-agent\s+reference\s+tiny\s+1\s/);
    const sessions = await cli(["get", "hs"]);
    expect(sessions.stdout).toMatch(/^NAME\s+AGENT\s+DESIRED\s+PHASE/);
    expect(sessions.stdout).toMatch(/cli-chat\s+cli-agent\s+running\s/);

    const json = await cli(["get", "agent", "cli-agent", "-o", "json"]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ kind: "Agent", metadata: { name: "cli-agent" } });
    const list = await cli(["get", "harnesssessions", "-o", "yaml"]);
    const parsed = parseYaml(list.stdout) as Json;
    expect(parsed.kind).toBe("HarnessSessionList");
    expect(parsed.items.map((i: Json) => i.metadata.name)).toContain("cli-chat");
    const one = parseYaml((await cli(["get", "agentruntime", "reference", "-o", "yaml"])).stdout) as Json;
    expect(one).toMatchObject({ kind: "AgentRuntime", spec: { contract: "v1alpha2" } });
    const rpc = await cli(["get", "sessions", "--json"]);
    expect(JSON.parse(rpc.stdout)).toHaveProperty("sessions");
  });

  it("describe shows status and conditions, never a literal credential", async () => {
    const agent = await cli(["describe", "agent", "cli-agent"]);
    expect(agent.code).toBe(0);
    expect(agent.stdout).toMatch(/^Name:\s+cli-agent\nNamespace:\s+default\nKind:\s+Agent\n/);
    expect(agent.stdout).not.toContain("sk-cli-literal-secret");
    const session = await cli(["describe", "hs", "cli-chat"]);
    expect(session.stdout).toContain("Conditions:");
    expect(session.stdout).toMatch(/TYPE\s+STATUS\s+REASON\s+SINCE\s+MESSAGE\n\s+Ready\s/);
  });

  it("reads the admin token from --data-dir when none is given", async () => {
    const run = await cli(["get", "art", "--data-dir", join(system.dataDir, "server")], {
      env: { AGENT_SESSIONS_TOKEN: undefined },
    });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("reference");
  });

  it("exit codes: 2 usage, 3 not found, 6 invalid, 7 server unreachable, 5 unauthenticated — each saying what to do", async () => {
    const unknownKind = await cli(["get", "widgets"]);
    expect(unknownKind.code).toBe(2);
    expect(unknownKind.stderr).toContain("unknown kind widgets; one of agentruntimes");
    expect((await cli(["get", "agents", "--bogus"])).code).toBe(2);
    expect((await cli(["events"])).code).toBe(2);
    const invalid = await cli(["apply", "-f", "-"], {
      input: "apiVersion: agent-sessions.dev/v1alpha1\nkind: Agent\nmetadata: {name: broken}\nspec: {}\n",
    });
    expect(invalid.code).toBe(6);
    expect(invalid.stderr).toContain("INVALID_ARGUMENT");
    expect(invalid.stderr).toContain("spec.runtimeRef");
    const badYaml = await cli(["apply", "-f", "-"], { input: "kind: [\n" });
    expect(badYaml.code).toBe(2);
    expect(badYaml.stderr).toContain("not valid YAML");

    const missing = await cli(["get", "agent", "nobody"]);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain("NOT_FOUND: Agent default/nobody not found");
    expect((await cli(["delete", "hs", "nobody"])).code).toBe(3);
    const noSession = await cli(["send", "nobody", "hi"]);
    expect(noSession.code).toBe(3);
    expect(noSession.stderr).toContain("hint: list the sessions with `agent-sessions get hs`");

    const unreachable = await cli(["get", "agents", "--server", "http://127.0.0.1:1"]);
    expect(unreachable.code).toBe(7);
    expect(unreachable.stderr).toContain(
      "hint: is the server running? start one with `agent-sessions serve`",
    );
    const denied = await cli(["get", "agents"], {
      env: { AGENT_SESSIONS_TOKEN: "not-the-token-0123456789" },
    });
    expect(denied.code).toBe(5);
    expect(denied.stderr).toContain("UNAUTHENTICATED");
    const asJson = await cli(["get", "agent", "nobody", "--json"]);
    expect(JSON.parse(asJson.stderr)).toMatchObject({ error: { code: "NOT_FOUND" } });
  });
});

describe("agent-sessions CLI: a session (real runner)", () => {
  let sessionId = "";

  it("apply --wait waits for Ready, showing the phases", async () => {
    const run = await cli(["apply", "-f", manifests, "--wait", "--timeout", "4m"]);
    expect(run.code).toBe(0);
    expect(run.stderr).toContain("harnesssession/cli-chat: Ready (SessionReady)");
    const s = (await system.call("GET", "/v1/namespaces/default/harnesssessions/cli-chat")).body as Json;
    expect(s.status.phase).toBe("Ready");
    sessionId = s.status.sessionId;
  });

  it("policy check previews the session's stack with the policy pack: no violations, exit 0", async () => {
    // The runner keeps its stacks under <its data dir>/pulumi-state: --data-dir names its parent.
    // Without -s every stack of that backend is checked: here the one of cli-chat.
    const run = await cli(["policy", "check", "--data-dir", system.dataDir]);
    expect(run.stdout).toMatch(/^default--\S*cli-chat\S*: no policy violations\n$/);
    expect(run.code).toBe(0);
  });

  it("a request to a session that is not Ready is exit 4 (precondition)", async () => {
    await system.call("PUT", "/v1/namespaces/default/harnesssessions/cli-idle", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "cli-idle" },
      spec: { agentRef: "cli-agent", runtimeRef: "reference", desiredState: "stopped" },
    });
    const refused = await cli(["send", "cli-idle", "hello"]);
    expect(refused.code).toBe(4);
    expect(refused.stderr).toContain("FAILED_PRECONDITION");
    expect(refused.stderr).toContain("hint: see why with `agent-sessions describe hs cli-idle`");
    expect((await cli(["delete", "hs", "cli-idle"])).code).toBe(0);
  });

  it("send streams the reply: text on stdout as it arrives, outcome and usage on stderr", async () => {
    const words = "one two three four five six seven eight";
    const child = spawn(bin, ["send", "cli-chat", `[slow] ${words}`, "--id", "cli-stream-1"], {
      env: { ...process.env, AGENT_SESSIONS_SERVER_URL: system.url, AGENT_SESSIONS_TOKEN: system.adminToken },
    });
    const chunks: { at: number; text: string }[] = [];
    let stderr = "";
    const started = Date.now();
    child.stdout.on("data", (d: Buffer) => chunks.push({ at: Date.now() - started, text: d.toString() }));
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    const ended = Date.now() - started;
    expect(code).toBe(0);
    expect(chunks.map((c) => c.text).join("")).toBe(`echo: ${words}\n`);
    // The model sends a word every 200 ms: the first words are printed long before the end.
    expect(chunks.length).toBeGreaterThan(3);
    expect(ended - (chunks[0]?.at ?? ended)).toBeGreaterThan(800);
    expect(stderr).toMatch(/\(cli-stream-1: succeeded; \d+ in \/ \d+ out tokens\)/);

    // The server audited it: one JSON line with the ids, outcome and usage, never the words.
    const audit = await until("the audit record", () =>
      (system.server?.logs.join("") ?? "")
        .split("\n")
        .find((l) => l.includes('"msg":"audit"') && l.includes('"request_id":"cli-stream-1"')),
    );
    expect(JSON.parse(audit)).toMatchObject({
      namespace: "default",
      session: "cli-chat",
      outcome: "succeeded",
      stream: true,
      http_request_id: expect.any(String),
    });
    expect(audit).not.toContain("four five");
    // …and counted it.
    const metrics = await fetch(`${system.url}/metrics`, {
      headers: { authorization: `Bearer ${system.adminToken}` },
    }).then((r) => r.text());
    expect(metrics).toMatch(/^agent_sessions_proxied_requests_total\{outcome="succeeded"\} [1-9]/m);
    expect(metrics).toMatch(/^agent_sessions_harness_sessions\{phase="Ready"\} 1$/m);
  });

  it("send --json prints each stream event as a JSON line; --no-stream the whole reply", async () => {
    const json = await cli(["send", "cli-chat", "hello there", "--json"]);
    expect(json.code).toBe(0);
    const events = json.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Json);
    expect(events.at(-1)).toMatchObject({ type: "result", result: { outcome: "succeeded" } });
    expect(
      events
        .filter((e) => e.type === "delta")
        .map((e) => e.text)
        .join(""),
    ).toBe("echo: hello there");
    const whole = await cli(["send", "cli-chat", "-", "--no-stream"], { input: "from stdin" });
    expect(whole).toMatchObject({ code: 0, stdout: "echo: from stdin\n" });
  });

  it("stop and resume wait for the phase, while events --follow shows the status frames", async () => {
    const follow = background(["events", "--follow", "--session", sessionId, "--json"]);
    await new Promise((r) => setTimeout(r, 1_000));
    const stopped = await cli(["stop", "cli-chat", "--timeout", "4m"]);
    expect(stopped.code).toBe(0);
    expect(stopped.stdout).toBe("harnesssession/cli-chat stopped (phase Stopped)\n");
    expect(stopped.stderr).toContain("harnesssession/cli-chat: Stopped (Stopped)");
    await until(
      "a STOPPED frame",
      () => follow.lines().some((l) => (JSON.parse(l) as Json).payload?.state === "STOPPED"),
      30_000,
    );
    expect(await follow.interrupt()).toBe(0);
    const states = follow.lines().map((l) => (JSON.parse(l) as Json).payload?.state);
    expect(states).toEqual(expect.arrayContaining(["STOPPING", "STOPPED"]));

    const resumed = await cli(["resume", "cli-chat", "--timeout", "4m"]);
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toBe("harnesssession/cli-chat resumed (phase Ready)\n");
    const again = await cli(["send", "cli-chat", "still there?", "--no-stream"]);
    expect(again).toMatchObject({ code: 0, stdout: "echo: still there?\n" });
  });

  it("events --since 0 replays the retained frames of a session", async () => {
    const replay = background(["events", "--follow", "--session", sessionId, "--since", "0"]);
    await until("the replay", () => replay.lines().length >= 4, 30_000);
    expect(await replay.interrupt()).toBe(0);
    // id, time, the HarnessSession by name, type, payload — from the session's first frame on.
    expect(replay.lines()[0]).toMatch(/^\s+1 {2}\S+ {2}default\/cli-chat {2}status\s+\{"state":/);
  });

  it("events --session NAME follows a HarnessSession by name: its phase changes and request outcomes too; get -w shows them as rows", async () => {
    const follow = background(["events", "--follow", "--session", "cli-chat", "--json"]);
    // Over the event stream only (a resync of an hour): every row after the first is an event's.
    const watch = background(["get", "hs", "cli-chat", "-w"], { AGENT_SESSIONS_WATCH_RESYNC_MS: "3600000" });
    await until("the watch's first row", () => watch.lines().some((l) => /^cli-chat\s/.test(l)), 30_000);
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await cli(["send", "cli-chat", "by name?", "--no-stream"])).code).toBe(0);
    expect((await cli(["stop", "cli-chat", "--timeout", "4m"])).code).toBe(0);
    await until(
      "RequestFinished and PhaseChanged to Stopped",
      () => {
        const payloads = follow.lines().map((l) => (JSON.parse(l) as Json).payload);
        return (
          payloads.some((p) => p?.event === "RequestFinished" && p.outcome === "succeeded") &&
          payloads.some((p) => p?.event === "PhaseChanged" && p.phase === "Stopped")
        );
      },
      60_000,
    );
    expect(await follow.interrupt()).toBe(0);
    for (const line of follow.lines()) {
      expect((JSON.parse(line) as Json).harness_session).toBe("default/cli-chat");
      // The frames name their session themselves (the server adds namespace and name).
      expect(JSON.parse(line) as Json).toMatchObject({ namespace: "default", name: "cli-chat" });
    }
    await until("a Stopped row", () => watch.lines().some((l) => /^cli-chat\s.*\bStopped\b/.test(l)), 30_000);
    expect(await watch.interrupt()).toBe(0);
    expect(watch.lines().filter((l) => l.startsWith("NAME ")).length).toBe(1);
    expect(watch.out.stderr).not.toContain("polling");
    const unknown = await cli(["events", "--follow", "--session", "nobody"]);
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toContain("agent-sessions get hs -n default");
    expect((await cli(["resume", "cli-chat", "--timeout", "4m"])).code).toBe(0);
  });

  it("delete tears the session down; afterwards it is not found (exit 3)", async () => {
    const deleted = await cli(["delete", "hs", "cli-chat"]);
    expect(deleted).toMatchObject({ code: 0, stdout: "harnesssession/cli-chat deleted\n" });
    expect((await cli(["get", "hs", "cli-chat"])).code).toBe(3);
  });
});

describe("agent-sessions CLI: policy check", () => {
  it("a program that breaks a policy is exit 1, naming the policy and the resource", async () => {
    const backend = join(system.dataDir, "policy-state");
    mkdirSync(backend);
    const env = { PULUMI_BACKEND_URL: `file://${backend}`, PULUMI_CONFIG_PASSPHRASE: "cli-policy" };
    const program = join(repoRoot, "test", "fixtures", "violating", "docker-privileged");
    const pulumi = (args: string[]) => {
      const r = spawnSync("pulumi", [...args, "--non-interactive"], {
        cwd: program,
        env: { ...process.env, ...env },
        encoding: "utf8",
      });
      if (r.status !== 0) throw new Error(`pulumi ${args.join(" ")}: ${r.stderr}`);
    };
    pulumi(["stack", "init", "cli-policy"]);
    try {
      pulumi(["config", "set", "image", referenceImage().image, "--stack", "cli-policy"]);
      pulumi(["config", "set", "name", "cli-policy", "--stack", "cli-policy"]);
      pulumi(["config", "set", "namespace", "agent-sessions", "--stack", "cli-policy"]);
      const run = await cli(["policy", "check", "--cwd", program, "-s", "cli-policy"], { env });
      expect(run.code).toBe(1);
      expect(run.stdout).toContain("cli-policy: 1 policy violation(s)");
      expect(run.stdout).toMatch(/\[mandatory\] no-privileged-containers container: /);
      expect(run.stderr).toContain("create agent-sessions-docker:index:Container container");
    } finally {
      pulumi(["stack", "rm", "cli-policy", "--yes", "--force"]);
    }
  });
});
