/**
 * The runtime conformance suite: what every runtime the project ships must do, checked the way a
 * user meets it — through the real server (`serve --no-runner` + a `runner --engine docker|kubernetes`
 * on the test bed's dockerd or single-node cluster, real Pulumi stacks), a HarnessSession bound to
 * the runtime `serve` registered, and the loopback model server on our bridge. What is checked on
 * the engine goes through an EngineProbe (test/support/engine-probes.ts), so the suite is the same
 * on both engines. One file per runtime and engine calls `runtimeConformance(name, engine)`:
 * `<runtime>.test.ts` (Docker) and `<runtime>.kubernetes.test.ts`.
 *
 * What a runtime declares decides what is asked of it: the checks of a capability it does not
 * declare (`tools`, `streaming`, `resume`) become checks that it does not pretend to have it, and
 * the test's name says which (never a silent skip).
 *
 * One session lives through the file in order: its image checked for what the runtime declares,
 * registered, Ready, asked, failed on purpose (model error, broken model output, a model that never
 * answers), made noisy, streamed, cancelled, asked for a tool call, stopped with a request in
 * flight, resumed, asked again, scanned for the credential, deleted.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../fixtures/model-server.ts";
import {
  dockerProbe,
  type Engine,
  type EngineProbe,
  kubernetesProbe,
  objectsGone,
} from "../support/engine-probes.ts";
import { dockerClient } from "../support/session-harness.ts";
import {
  followEvents,
  type Json,
  startSessionModelServer,
  System,
  until,
  writeLogTails,
} from "../support/system.ts";
import { applyTestbedEnv, builtImage } from "../support/testbed.ts";
import { imageLacks } from "./image-precheck.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import { type ShippedRuntimeName, shippedRuntime } from "../../runtimes/catalogue.ts";

/** The runtimes the project ships (runtimes/catalogue.ts), by AgentRuntime name. */
export type ShippedRuntime = ShippedRuntimeName;

/** The server's deadline of one request here: the "never answers" check waits for it. */
const REQUEST_TIMEOUT_MS = 15_000;
/** What the noisy check prints into the workload's output: 8 MiB, twice the Docker bound. */
const NOISE_BYTES = 8 * 1024 * 1024;

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SESSION_UID = "65532";

/** The names of the file tools the model server is offered by each runtime that declares `tools`. */
const FILE_TOOLS: Record<ShippedRuntime, { write: string; read: string }> = {
  reference: { write: "write", read: "read" },
  pi: { write: "write", read: "read" },
  compass: { write: "write", read: "read" },
  hermes: { write: "write_file", read: "read_file" },
};

type Sse = { event: string; data: Json };

export function runtimeConformance(runtime: ShippedRuntime, engine: Engine = "docker"): void {
  // The capabilities the catalogue declares, as `serve` registers them: test names are made
  // before any process starts, so they come from there; the first test checks the registered runtime.
  const shipped = shippedRuntime(runtime);
  const declared: string[] = [...shipped.capabilities];
  const has = (capability: string) => declared.includes(capability);
  // Unique per run: the engines (and a cluster's namespace) are shared by every checkout here.
  const NAME = `conf-${runtime}-${engine[0]}${randomBytes(2).toString("hex")}`;
  const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
  const NOTE = `note-${randomBytes(4).toString("hex")}`;
  /** The provider credential the Agent allows, read by the server from its environment. */
  const SECRET = `sk-conf-${randomBytes(12).toString("hex")}`;

  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  let events: ReturnType<typeof followEvents>;
  let container = "";
  /** The workspace of the seed-004 session (SpawnAgent). */
  let rpcContainer = "";
  /**
   * The seed-004 session, spawned at the start beside the HarnessSession: its provisioning (a
   * Pulumi up, the workload's start) overlaps the session's instead of adding its own to the file;
   * its test reads the outcome. Its removal likewise overlaps the session's deletion.
   */
  let spawning: Promise<{ status: number; body: Json }> | undefined;
  let removing: Promise<{ status: number; body: Json }> | undefined;
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

  /** The whole session volume as the workload sees it (a tar of /workspace, by the image's shell), as text. */
  const workspaceArchive = () => probe.exec(container, ["sh", "-c", "tar -cf - -C /workspace ."]);

  beforeAll(async () => {
    if (engine === "kubernetes") applyTestbedEnv();
    probe = engine === "docker" ? dockerProbe() : await kubernetesProbe("agent-sessions");
    // Where the engine's sessions reach the host (the 1.35 cluster: the link, a port its guard admits).
    model = await startSessionModelServer(engine);
    process.env.E2E_MODEL_KEY = SECRET;
    image = builtImage(shipped.testbedImage);
    system = new System(undefined, {
      [shipped.imageSetting]: image.image,
      AGENT_SESSIONS_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    });
    await system.startServer();
    await system.startRunner(["--engine", engine]);
    events = followEvents(system);
    const agent = await call("PUT", `${NS}/agents/${NAME}`, modelAgent(NAME, model, { runtimeRef: runtime }));
    expect(agent.status).toBe(201);
    // A second account for the seed-004 RPC session (at most one live container per account).
    const rpcAgent = await call(
      "PUT",
      `${NS}/agents/${NAME}-rpc`,
      modelAgent(`${NAME}-rpc`, model, { runtimeRef: runtime }),
    );
    expect(rpcAgent.status).toBe(201);
    spawning = system.rpc("SpawnAgent", { agent_ref: `${NAME}-rpc`, client_request_id: `${NAME}-rpc-1` });
    spawning.then(
      (r) => {
        rpcContainer = r.body?.container_name ?? "";
      },
      () => undefined,
    );
  });

  afterEach((context) => {
    if (context.task.result?.state !== "fail") return;
    writeLogTails(system);
  });

  afterAll(async () => {
    await system?.call("DELETE", `${SESSIONS}/${NAME}`).catch(() => undefined);
    await spawning?.catch(() => undefined);
    await removing?.catch(() => undefined);
    if (rpcContainer)
      await system?.rpc("RemoveAgentWorkspace", { container_name: rpcContainer }).catch(() => undefined);
    await events?.close();
    for (const which of ["server", "runner"] as const)
      if (system?.[which]?.logs.length)
        writeFileSync(join(system.dataDir, `${which}.log`), system[which]?.logs.join("") ?? "");
    await system?.stop();
    await model?.close();
    probe?.close();
  });

  describe(`runtime conformance: ${runtime} on ${engine} (declares ${declared.join(", ")})`, () => {
    it(`is registered by serve as default/${runtime}: v1alpha2, approved, pinned by its registry digest`, async () => {
      const got = await call("GET", `${NS}/agentruntimes/${runtime}`);
      expect(got.status).toBe(200);
      expect(got.body.spec).toMatchObject({ image: image.image, contract: "v1alpha2" });
      // Approval is the server's configuration (runtime-approval.ts), reported in status.
      expect(got.body.status).toMatchObject({ approved: true });
      expect([...got.body.spec.capabilities].sort()).toEqual([...declared].sort());
    });

    it("has in its image what it declares: its entrypoint's and agent command's programs and files, a shell for tools", async () => {
      const spec = (await call("GET", `${NS}/agentruntimes/${runtime}`)).body.spec;
      expect(await imageLacks(dockerClient(), image.image, spec)).toEqual([]);
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
      expect(container).toContain(NAME);
      expect(ready.status.resolvedImageDigest).toBe(image.digest);
      // What the engine was told (container config / pod spec) …
      expect(await probe.isolation(container)).toEqual({
        tty: false,
        stdin: false,
        readOnlyRoot: true,
        user: Number(SESSION_UID),
        serviceAccountToken: false,
      });
      // … and what the adapter process really has.
      const seen = await probe.exec(container, [
        "sh",
        "-c",
        [
          "id -u",
          "ls -l /proc/1/cwd",
          "{ echo x >/conformance-probe; } 2>/dev/null && echo ROOT-WRITABLE",
          "for fd in 0 1 2; do readlink /proc/1/fd/$fd; done | grep -E '^/dev/(pts|tty|console)' && echo HAS-TTY",
          "ls /var/run/secrets/kubernetes.io/serviceaccount/token 2>/dev/null && echo SA-TOKEN",
          "echo ok >/workspace/.conformance-probe && cat /workspace/.conformance-probe && rm /workspace/.conformance-probe",
        ].join("; "),
      ]);
      const lines = seen.trim().split("\n");
      expect(lines[0]).toBe(SESSION_UID);
      expect(lines[1]).toMatch(/\/proc\/1\/cwd -> \/workspace$/);
      expect(seen).not.toContain("ROOT-WRITABLE");
      expect(seen).not.toContain("HAS-TTY");
      expect(seen).not.toContain("SA-TOKEN");
      expect(lines.at(-1)).toBe("ok");
    });

    it("answers health and readiness, and refuses a request without the adapter token", async () => {
      const url = await probe.adapterUrl(container);
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
      // Status counts model calls as the gateway saw them (a harness may make several a request),
      // and keeps what the adapter claimed per request apart.
      const status = (await session()).status;
      expect(status.usage).toMatchObject({ source: "gateway", unavailableRequests: 0 });
      expect(status.usage.reportedRequests).toBeGreaterThanOrEqual(1);
      expect(status.usage.reportedRequests).toBeLessThanOrEqual(model.requests);
      expect(status.claimedUsage).toMatchObject({ reportedRequests: 1, unavailableRequests: 0 });
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

    it("fails a request whose model output is broken (not the protocol, or cut off): failed, never a fake success", async () => {
      for (const [input, id] of [
        ["[garbage] hello", "garbage-1"],
        ["[truncated] hello", "truncated-1"],
      ] as const) {
        const reply = await ask({ input, id });
        expect(reply.status, `${id}: ${JSON.stringify(reply.body)}`).toBe(503);
        expect(reply.body).toMatchObject({ code: "UNAVAILABLE", details: { result: { outcome: "failed" } } });
        expect((await session()).status).toMatchObject({ lastRequestId: id, lastRequestOutcome: "failed" });
      }
      if (has("streaming")) {
        // Streamed to the client as well: the deltas that came are not passed off as an answer.
        const events = await askStreamed({ input: "[truncated] hello", id: "truncated-2" });
        expect(events.at(-1)).toMatchObject({ event: "result", data: { result: { outcome: "failed" } } });
      }
    });

    it("answers a request the model never finishes with DEADLINE_EXCEEDED, and stays Ready and answering", async () => {
      const hung = await ask({ input: "[hang] hello", id: "hang-1" });
      expect(hung.status, JSON.stringify(hung.body)).toBe(504);
      expect(hung.body.code).toBe("DEADLINE_EXCEEDED");
      const settled = await until("the timed-out request settled", async () => {
        const s = await session();
        return s.status.activeRequests === 0 ? s : undefined;
      });
      expect(settled.status.phase).toBe("Ready");
      const after = await ask({ input: "[fast] still there", id: "after-hang-1" });
      expect(after.status).toBe(200);
      expect(after.body).toMatchObject({ outcome: "succeeded", output: "echo: still there" });
    });

    it(
      engine === "docker"
        ? "keeps answering when its output is noisy, the engine keeping a bounded log (json-file 2 x 2 MiB)"
        : "keeps answering when its output is noisy (the node's kubelet bounds a pod's log)",
      async () => {
        // 8 MiB into the adapter's own stdout, from inside the workload, as a chatty agent would.
        await probe.exec(container, [
          "sh",
          "-c",
          `head -c ${NOISE_BYTES} /dev/zero | tr '\\0' x | fold -w 1023 >/proc/1/fd/1`,
        ]);
        const kept = await probe.logBytes(container);
        // The noise reached the engine's log …
        expect(kept).toBeGreaterThan(1024 * 1024);
        // … which, where agent-sessions sets the bound, stays within it (a line of slack per file).
        if (probe.logBound !== undefined) expect(kept).toBeLessThan(probe.logBound + 64 * 1024);
        const after = await ask({ input: "[fast] after the noise", id: "noise-1" });
        expect(after.status).toBe(200);
        expect(after.body).toMatchObject({ outcome: "succeeded", output: "echo: after the noise" });
      },
    );

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

    it("stops while a request is in flight: the request settles, the adapter exits 0 on SIGTERM, the volume is kept; resumes Ready in the same workspace", async () => {
      const since = Date.now() - 1_000;
      let stopped: Promise<{ status: number }> | undefined;
      const words = "one two three four five six seven eight";
      const inFlight = has("streaming")
        ? askStreamed({ input: `[slow] ${words}`, id: "drain-1" }, () => {
            stopped ??= call("PATCH", `${SESSIONS}/${NAME}`, { spec: { desiredState: "stopped" } });
          }).then((events) => events.at(-1)?.data.result)
        : ask({ input: `[slow] ${words}`, id: "drain-1" }).then((reply) => reply.body);
      if (!has("streaming")) {
        await until("drain-1 in flight", async () => ((await session()).status.activeRequests > 0 ? 1 : 0));
        stopped = call("PATCH", `${SESSIONS}/${NAME}`, { spec: { desiredState: "stopped" } });
      }
      expect(await inFlight).toMatchObject({ id: "drain-1", outcome: "succeeded", output: `echo: ${words}` });
      expect((await stopped)?.status).toBe(200);
      await phase("Stopped", 180);
      await until(
        "workload gone, volume kept",
        () => probe.stoppedKeepingVolume(container),
        probe.stoppedWithinMs,
      );
      // SIGTERM, the drain, a clean exit: never the engine's kill after the grace period (137).
      expect(
        await until(
          "the adapter's exit",
          () => probe.exitCodesSince(container, since).then((c) => (c.length ? c : undefined)),
          30_000,
        ),
      ).toEqual([0]);
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
      const adapterLogs = await probe.logs(container);
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
      if (!spawning) throw new Error("the seed-004 session was not spawned");
      const spawned = await spawning;
      received.push(JSON.stringify(spawned.body));
      expect(spawned.status, JSON.stringify(spawned.body)).toBe(200);
      expect(spawned.body.state).toBe("READY");
      rpcContainer = spawned.body.container_name;
      const sessionId = spawned.body.session_id as string;
      // The exec'd process is the runtime's declared agent (the reference one when it declares none).
      const command: string[] = registered.spec.agent?.command ?? [
        "/bin/node",
        "/app/runtimes/reference/agent.ts",
      ];
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
      removing = system.rpc("RemoveAgentWorkspace", { container_name: rpcContainer });
    });

    it("is deleted with its workload and volume (and the seed-004 workspace removed)", async () => {
      expect((await call("DELETE", `${SESSIONS}/${NAME}`)).status).toBe(200);
      expect((await objectsGone(probe, container)).length).toBeGreaterThan(2);
      if (!removing) throw new Error("the seed-004 workspace was not removed");
      expect((await removing).body).toEqual({ container_name: rpcContainer, removed: true });
      rpcContainer = "";
    });
  });
}
