/**
 * The runtime conformance suite: what every runtime the project ships must do, checked the way a
 * user meets it — through the real server (`serve --no-runner` + a `runner` on the test bed's
 * dockerd, real Pulumi stacks), a HarnessSession bound to the runtime `serve` registered, and the
 * loopback model server on our bridge. One file per runtime calls `runtimeConformance(name)`.
 *
 * What a runtime declares decides what is asked of it: the checks of a capability it does not
 * declare (`tools`, `streaming`, `resume`) become checks that it does not pretend to have it, and
 * the test's name says which (never a silent skip).
 *
 * One session lives through the file in order: registered, Ready, asked, streamed, failed on
 * purpose, asked for a tool call, stopped, resumed, asked again, scanned for the credential,
 * deleted.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type Docker from "dockerode";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe } from "../engine/engine-probes.ts";
import { dockerClient } from "../engine/session-harness.ts";
import { BRIDGE_IP, followEvents, type Json, System, until } from "../engine/system.ts";
import { builtImage } from "../engine/testbed.ts";

/** The runtimes the project ships, by AgentRuntime name, and the test bed image each is built as. */
const IMAGES = {
  reference: "reference-image",
  pi: "pi-image",
  compass: "compass-image",
  hermes: "hermes-image",
} as const;
export type ShippedRuntime = keyof typeof IMAGES;
/** The server setting that pins each runtime's image (proxy/config.ts). */
const IMAGE_SETTINGS: Record<ShippedRuntime, string> = {
  reference: "AGENT_SESSIONS_REFERENCE_IMAGE",
  pi: "AGENT_SESSIONS_PI_IMAGE",
  compass: "AGENT_SESSIONS_COMPASS_IMAGE",
  hermes: "AGENT_SESSIONS_HERMES_IMAGE",
};

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SESSION_UID = "65532";

/**
 * The capabilities each runtime declares, as `serve` registers them (proxy/shipped-runtimes.ts).
 * Test names are made before any process starts, so they come from here; the first test checks
 * that the registered runtime declares exactly these.
 */
const DECLARED: Record<ShippedRuntime, string[]> = {
  reference: ["streaming", "resume"],
  pi: ["streaming", "tools", "resume"],
  compass: ["streaming", "tools", "resume"],
  hermes: ["streaming", "tools", "resume"],
};

/** The names of the file tools the model server is offered by each runtime that declares `tools`. */
const FILE_TOOLS: Record<ShippedRuntime, { write: string; read: string }> = {
  reference: { write: "write", read: "read" },
  pi: { write: "write", read: "read" },
  compass: { write: "write", read: "read" },
  hermes: { write: "write_file", read: "read_file" },
};

type Sse = { event: string; data: Json };

export function runtimeConformance(runtime: ShippedRuntime): void {
  const declared = DECLARED[runtime];
  const has = (capability: string) => declared.includes(capability);
  const NAME = `conf-${runtime}`;
  const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
  const NOTE = `note-${randomBytes(4).toString("hex")}`;
  /** The provider credential the Agent allows, read by the server from its environment. */
  const SECRET = `sk-conf-${randomBytes(12).toString("hex")}`;

  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  let docker: Docker;
  let events: ReturnType<typeof followEvents>;
  let container = "";
  /** The workspace of the seed-004 session (SpawnAgent). */
  let rpcContainer = "";
  /**
   * The runtime's image as the test bed recorded it when this suite started. The state file is
   * shared by every checkout on the machine (another one may rebuild it meanwhile): the server
   * is given this one, and this one is what is checked.
   */
  let image: { image: string; digest: string };
  /** Every body and event the suite received, scanned for the credential at the end. */
  const received: string[] = [];

  const call = async (method: string, path: string, body?: unknown) => {
    const reply = await system.call(method, path, body);
    received.push(JSON.stringify(reply.body));
    return reply;
  };
  const ask = (body: Record<string, unknown>) => call("POST", `${SESSIONS}/${NAME}/requests`, body);
  const session = async (): Promise<Json> => (await call("GET", `${SESSIONS}/${NAME}`)).body;
  const phase = (want: string, seconds = 240): Promise<Json> =>
    until(
      `${NAME} ${want}`,
      async () => {
        const s = await session();
        return s.status?.phase === want ? s : undefined;
      },
      seconds * 1000,
    );

  async function askStreamed(body: Record<string, unknown>, onEvent?: (e: Sse) => void): Promise<Sse[]> {
    const res = await fetch(`${system.url}${SESSIONS}/${NAME}/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
    });
    const events: Sse[] = [];
    if (!res.body) return events;
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(piece, { stream: true });
      for (let i = buffer.indexOf("\n\n"); i >= 0; i = buffer.indexOf("\n\n")) {
        const block = buffer.slice(0, i);
        buffer = buffer.slice(i + 2);
        received.push(block);
        const event = {
          event: block.match(/^event: (.*)$/m)?.[1] ?? "message",
          data: JSON.parse(block.match(/^data: (.*)$/m)?.[1] ?? "null"),
        };
        events.push(event);
        onEvent?.(event);
      }
    }
    return events;
  }

  /** The whole session volume as the workload sees it (a tar of /workspace), as text. */
  async function workspaceArchive(): Promise<string> {
    const stream = await docker.getContainer(container).getArchive({ path: "/workspace" });
    const chunks: Buffer[] = [];
    for await (const chunk of stream as AsyncIterable<Buffer>) chunks.push(chunk);
    return Buffer.concat(chunks).toString("latin1");
  }

  /** The adapter's address on its session network (the runner reaches it there; so can the host). */
  async function adapterUrl(): Promise<string> {
    const info = await docker.getContainer(container).inspect();
    const ip = Object.values(info.NetworkSettings.Networks)[0]?.IPAddress;
    if (!ip) throw new Error(`${container} has no address`);
    return `http://${ip}:8080`;
  }

  beforeAll(async () => {
    probe = dockerProbe();
    docker = dockerClient();
    model = await startModelServer(BRIDGE_IP, 0);
    process.env.E2E_MODEL_KEY = SECRET;
    image = builtImage(IMAGES[runtime]);
    system = new System(undefined, {
      [IMAGE_SETTINGS[runtime]]: image.image,
    });
    await system.startServer();
    await system.startRunner(["--engine", "docker"]);
    events = followEvents(system);
    const agent = await call("PUT", `${NS}/agents/${NAME}`, {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: NAME },
      spec: {
        runtimeRef: runtime,
        credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "E2E_MODEL_KEY" } }],
        model: { baseUrl: model.url, name: "tiny" },
        egress: [{ cidr: `${BRIDGE_IP}/32`, port: model.port }],
      },
    });
    expect(agent.status).toBe(201);
    // A second account for the seed-004 RPC session (at most one live container per account).
    const rpcAgent = await call("PUT", `${NS}/agents/${NAME}-rpc`, {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: `${NAME}-rpc` },
      spec: {
        runtimeRef: runtime,
        credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "E2E_MODEL_KEY" } }],
        model: { baseUrl: model.url, name: "tiny" },
        egress: [{ cidr: `${BRIDGE_IP}/32`, port: model.port }],
      },
    });
    expect(rpcAgent.status).toBe(201);
  });

  afterEach((context) => {
    if (context.task.result?.state !== "fail") return;
    for (const which of ["server", "runner"] as const)
      process.stderr.write(
        `--- ${which} log (tail) ---\n${(system[which]?.logs ?? []).join("").slice(-6_000)}\n`,
      );
  });

  afterAll(async () => {
    await system?.call("DELETE", `${SESSIONS}/${NAME}`).catch(() => undefined);
    if (rpcContainer)
      await system?.rpc("RemoveAgentWorkspace", { container_name: rpcContainer }).catch(() => undefined);
    await events?.close();
    for (const which of ["server", "runner"] as const)
      if (system?.[which]?.logs.length)
        writeFileSync(join(system.dataDir, `${which}.log`), system[which]?.logs.join("") ?? "");
    await system?.stop();
    await model?.close();
  });

  describe(`runtime conformance: ${runtime} (declares ${declared.join(", ")})`, () => {
    it(`is registered by serve as default/${runtime}: v1alpha2, approved, pinned by its registry digest`, async () => {
      const got = await call("GET", `${NS}/agentruntimes/${runtime}`);
      expect(got.status).toBe(200);
      expect(got.body.spec).toMatchObject({ image: image.image, contract: "v1alpha2" });
      // Approval is the server's configuration (runtime-approval.ts), reported in status.
      expect(got.body.status).toMatchObject({ approved: true });
      expect([...got.body.spec.capabilities].sort()).toEqual([...declared].sort());
    });

    it("becomes Ready, running as uid 65532 with a read-only root, no TTY, /workspace as its cwd", async () => {
      const created = await call("PUT", `${SESSIONS}/${NAME}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name: NAME },
        spec: { agentRef: NAME, runtimeRef: runtime, desiredState: "running", idleTimeout: "10m" },
      });
      expect(created.status).toBe(201);
      const ready = await phase("Ready");
      container = ready.status.containerName;
      expect(container).toMatch(/^as-default-conf-/);
      expect(ready.status.resolvedImageDigest).toBe(image.digest);
      const info = await docker.getContainer(container).inspect();
      expect(info.Config.Tty).toBe(false);
      expect(info.HostConfig.ReadonlyRootfs).toBe(true);
      const seen = await probe.exec(container, [
        "sh",
        "-c",
        "id -u; ls -l /proc/1/cwd; { echo x >/conformance-probe; } 2>/dev/null && echo ROOT-WRITABLE; echo ok >/workspace/.conformance-probe && cat /workspace/.conformance-probe && rm /workspace/.conformance-probe",
      ]);
      const lines = seen.trim().split("\n");
      expect(lines[0]).toBe(SESSION_UID);
      expect(lines[1]).toMatch(/\/proc\/1\/cwd -> \/workspace$/);
      expect(seen).not.toContain("ROOT-WRITABLE");
      expect(lines.at(-1)).toBe("ok");
    });

    it("answers health and readiness, and refuses a request without the adapter token", async () => {
      const url = await adapterUrl();
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      const ready = await fetch(`${url}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({ ready: true });
      const anonymous = await fetch(`${url}/v1/requests`, {
        method: "POST",
        body: JSON.stringify({ id: "x", input: "hello" }),
      });
      expect(anonymous.status).toBe(401);
    });

    it("answers a request through the proxy with the usage the model reported", async () => {
      const before = model.requests;
      const told = await ask({ input: `remember ${TOKEN}`, id: "remember-1" });
      expect(told.status).toBe(200);
      expect(told.body).toMatchObject({
        id: "remember-1",
        outcome: "succeeded",
        output: `OK, I will remember ${TOKEN}.`,
      });
      expect(told.body.usage.input_tokens).toBeGreaterThan(0);
      expect(told.body.usage.output_tokens).toBeGreaterThan(0);
      expect(model.requests).toBeGreaterThan(before);
      // The session used the Agent's credential.
      expect(model.authHeaders.at(-1)).toBe(`Bearer ${SECRET}`);
      expect((await session()).status.usage).toMatchObject({ reportedRequests: 1, unavailableRequests: 0 });
    });

    it("records usage the model did not report as unavailable, never as zero", async () => {
      const reply = await ask({ input: "[nousage] hello", id: "nousage-1" });
      expect(reply.status).toBe(200);
      expect(reply.body.usage).toBe("unavailable");
      expect((await session()).status.lastRequestUsage).toBe("unavailable");
    });

    it("fails a request whose model call fails: a failed result, never a fake success", async () => {
      const failed = await ask({ input: "[fail] please", id: "fail-1" });
      expect(failed.status).toBe(503);
      expect(failed.body).toMatchObject({ code: "UNAVAILABLE", details: { result: { outcome: "failed" } } });
      expect((await session()).status).toMatchObject({
        lastRequestId: "fail-1",
        lastRequestOutcome: "failed",
      });
    });

    if (has("streaming")) {
      it("streams a reply (streaming): deltas as the model sends them, then the result", async () => {
        const words = "one two three four five six";
        const events = await askStreamed({ input: `[slow] ${words}`, id: "stream-1" });
        const deltas = events.filter((e) => e.event === "delta");
        expect(deltas.length).toBeGreaterThan(3);
        expect(deltas.map((d) => d.data.text).join("")).toBe(`echo: ${words}`);
        expect(events.at(-1)).toMatchObject({ event: "result", data: { result: { outcome: "succeeded" } } });
      });

      it("cancels a request mid-stream (streaming): the result is cancelled", async () => {
        const words = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ");
        let cancelled: Promise<unknown> | undefined;
        const events = await askStreamed({ input: `[slow] ${words}`, id: "cancel-1" }, (e) => {
          if (e.event === "delta" && !cancelled)
            cancelled = system.call("POST", `${SESSIONS}/${NAME}/requests/cancel-1/cancel`);
        });
        expect(await cancelled).toMatchObject({ status: 202 });
        const last = events.at(-1);
        expect(
          (last?.event === "result" && last.data.result.outcome === "cancelled") ||
            (last?.event === "error" && last.data.code === "CANCELLED"),
        ).toBe(true);
        const settled = await until("settled", async () => {
          const s = await session();
          return s.status.activeRequests === 0 ? s : undefined;
        });
        expect(settled.status.lastRequestOutcome).toBe("cancelled");
      });
    } else {
      it("refuses a streamed request (declares no streaming)", async () => {
        const refused = await ask({ input: "hello", stream: true });
        expect(refused.status).toBe(400);
      });
    }

    if (has("tools")) {
      it("changes a file in /workspace through a real tool call (tools)", async () => {
        const calls = model.toolCalls.length;
        const events = await askStreamed({
          input: `write file conformance/note.txt with content ${NOTE}`,
          id: "write-1",
        });
        expect(events.at(-1)).toMatchObject({
          event: "result",
          data: { result: { outcome: "succeeded", output: "I wrote conformance/note.txt." } },
        });
        const write = FILE_TOOLS[runtime].write;
        expect(model.toolCalls.slice(calls).map((c) => c.name)).toEqual([write]);
        expect(events.filter((e) => e.event === "tool").map((e) => [e.data.phase, e.data.name])).toEqual([
          ["start", write],
          ["end", write],
        ]);
        expect(await probe.readFile(container, "/workspace/conformance/note.txt")).toBe(NOTE);
        const owner = await probe.exec(container, ["stat", "-c", "%u", "/workspace/conformance/note.txt"]);
        expect(owner.trim()).toBe(SESSION_UID);
      });
    } else {
      it("calls no tool when asked to write a file (declares no tools): nothing is written", async () => {
        const reply = await ask({ input: "write file conformance/note.txt with content x", id: "write-1" });
        expect(reply.status).toBe(200);
        expect(reply.body.outcome).toBe("succeeded");
        expect(model.toolCalls).toEqual([]);
        const listed = await probe.exec(container, ["sh", "-c", "ls /workspace/conformance 2>&1 || true"]);
        expect(listed).toMatch(/No such file or directory|can't access/);
      });
    }

    it("stops with its volume kept and resumes Ready in the same workspace", async () => {
      expect((await call("PATCH", `${SESSIONS}/${NAME}`, { spec: { desiredState: "stopped" } })).status).toBe(
        200,
      );
      await phase("Stopped", 180);
      await until("workload gone, volume kept", () => probe.stoppedKeepingVolume(container), 60_000);
      expect((await call("PATCH", `${SESSIONS}/${NAME}`, { spec: { desiredState: "running" } })).status).toBe(
        200,
      );
      const ready = await phase("Ready");
      expect(ready.status.containerName).toBe(container);
      expect(await probe.running(container)).toBe(true);
    });

    if (has("resume")) {
      it("keeps its conversation across the restart (resume): the token is recalled", async () => {
        const recalled = await ask({ input: "what token did I give you?", id: "recall-1" });
        expect(recalled.status).toBe(200);
        expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
      });
    } else {
      it("starts a fresh conversation after the restart (declares no resume)", async () => {
        const recalled = await ask({ input: "what token did I give you?", id: "recall-1" });
        expect(recalled.body.output).toBe("I was not told a token.");
      });
    }

    if (has("tools")) {
      it("reads the file back through a tool call after the restart (tools)", async () => {
        const calls = model.toolCalls.length;
        const read = await ask({ input: "what is in file conformance/note.txt?", id: "read-1" });
        expect(read.status).toBe(200);
        expect(read.body.output).toBe(`conformance/note.txt contains: ${NOTE}`);
        expect(model.toolCalls.slice(calls).map((c) => c.name)).toEqual([FILE_TOOLS[runtime].read]);
      });
    }

    it("puts the credential in no output, frame, result, log, or file of the session volume", async () => {
      // It was used: the model saw it on every call.
      expect(model.authHeaders.every((h) => h === `Bearer ${SECRET}`)).toBe(true);
      const results = await probe.readFile(container, "/workspace/results.ndjson");
      expect(results).toContain('"id":"recall-1"');
      const adapterLogs = (
        await docker.getContainer(container).logs({ stdout: true, stderr: true })
      ).toString();
      const frames = events.events.map((e) => JSON.stringify(e));
      expect(frames.length).toBeGreaterThan(0);
      const logs = [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join("");
      for (const [where, text] of Object.entries({
        replies: received.join("\n"),
        frames: frames.join("\n"),
        "server and runner logs": logs,
        "adapter logs": adapterLogs,
        "session volume": await workspaceArchive(),
      }))
        expect(text.includes(SECRET), `the credential appears in the ${where}`).toBe(false);
    });

    it("runs its agent command for seed-004 sessions (spec.agent.command): SpawnAgent READY, a message answered as frames", async () => {
      const registered = (await call("GET", `${NS}/agentruntimes/${runtime}`)).body;
      const spawned = await system.rpc("SpawnAgent", {
        agent_ref: `${NAME}-rpc`,
        client_request_id: `${NAME}-rpc-1`,
      });
      received.push(JSON.stringify(spawned.body));
      expect(spawned.status, JSON.stringify(spawned.body)).toBe(200);
      expect(spawned.body.state).toBe("READY");
      rpcContainer = spawned.body.container_name;
      const sessionId = spawned.body.session_id as string;
      // The exec'd process is the runtime's declared agent (the reference one when it declares none).
      const command: string[] = registered.spec.agent?.command ?? ["/bin/node", "/app/reference/agent.ts"];
      // Every process's argv, NUL-separated (a process may end between the glob and its read).
      const processes = await probe.exec(rpcContainer, [
        "sh",
        "-c",
        "cat /proc/[0-9]*/cmdline 2>/dev/null; true",
      ]);
      expect(processes.replace(/\0/g, " ")).toContain(command.join(" "));
      const sent = await system.rpc("SendAgentMessage", {
        session_id: sessionId,
        message: { type: "message", text: `remember ${TOKEN}` },
      });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      const answer = await until(
        "the agent's answer frame",
        () =>
          events.events.find(
            (e) =>
              e.data?.session_id === sessionId &&
              e.data?.type === "message" &&
              String(e.data.payload?.text).includes(TOKEN),
          ),
        60_000,
      );
      expect(answer.data.payload.role).toBe("assistant");
      expect((await system.rpc("RemoveAgentWorkspace", { container_name: rpcContainer })).status).toBe(200);
      rpcContainer = "";
    });

    it("is deleted with its workload and volume", async () => {
      expect((await call("DELETE", `${SESSIONS}/${NAME}`)).status).toBe(200);
      const objects = await probe.objects(container);
      expect(Object.entries(objects).filter(([, exists]) => exists)).toEqual([]);
    });
  });
}
