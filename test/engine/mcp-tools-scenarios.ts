/**
 * MCP tools in sessions (issue 39) end to end, real parts only, the engine a parameter: `serve
 * --no-runner`, a `runner` process, real stacks, the compass and hermes images, the loopback model
 * server (scripted to call a tool: "call tool NAME with JSON") and a real MCP server built with the
 * official SDK (test/fixtures/mcp-server.ts), which logs every call and the credential it saw.
 * The sessions' Agents allow no route to the MCP server: the gateway is their only way to it.
 */
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { MCP_TRANSPORT_INVARIANT } from "../../contracts/mcp.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import { type McpFixture, startMcpFixture } from "../fixtures/mcp-server.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { Engine, EngineProbe } from "../support/engine-probes.ts";
import { sessionHostAddress, sessionHostPorts } from "../support/testbed.ts";
import {
  followEvents,
  type Json,
  System,
  startSessionModelServer,
  until,
  writeLogTails,
} from "../support/system.ts";

export type McpToolsScenarioOptions = {
  engine: Engine;
  probe: () => EngineProbe | Promise<EngineProbe>;
  /** How long provisioning to Ready may take, in seconds. @default 240 */
  readySeconds?: number;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
/** Two real harnesses that declare `mcp`. */
const RUNTIMES = ["compass", "hermes"] as const;

async function startFixture(engine: Engine): Promise<McpFixture> {
  const host = sessionHostAddress(engine);
  // On the cluster's link: from the middle of the admitted range (model servers take its bottom, the gateway its top).
  const ports = engine === "docker" ? [0] : sessionHostPorts(engine).slice(20);
  let last: unknown;
  for (const port of ports) {
    try {
      return await startMcpFixture(host, port);
    } catch (error) {
      if ((error as { code?: string }).code !== "EADDRINUSE") throw error;
      last = error;
    }
  }
  throw new Error(`no free MCP fixture port on ${host}: ${String(last)}`);
}

export function mcpToolsScenarios(options: McpToolsScenarioOptions): void {
  const READY_MS = (options.readySeconds ?? 240) * 1000;
  /** The MCP server's credential: only the gateway may ever hold it. */
  const SECRET = `mcp-planted-${randomBytes(16).toString("hex")}`;
  const prefix = `mcp${randomBytes(2).toString("hex")}`;
  const sessionOf = (runtime: string) => `${prefix}-${runtime}`;
  const SERVER = `${prefix}-tools`;

  let system: System;
  let model: ModelServer;
  let fixture: McpFixture;
  let probe: EngineProbe;
  const workloads = new Map<string, string>();

  const agent = (name: string, runtimeRef: string, mcpServers: unknown[]) => ({
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name },
    spec: {
      runtimeRef,
      credentials: [{ name: "MODEL_API_KEY", value: "sk-model-key" }],
      model: { baseUrl: model.url, name: "tiny" },
      // No route to the model nor to the MCP server: the gateway is the only way.
      egress: [],
      mcpServers,
    },
  });

  async function session(name: string): Promise<Json> {
    const got = await system.call("GET", `${SESSIONS}/${name}`);
    if (got.status !== 200) throw new Error(`GET ${name}: ${got.status} ${JSON.stringify(got.body)}`);
    return got.body;
  }

  async function put(name: string, agentRef: string): Promise<void> {
    const created = await system.call("PUT", `${SESSIONS}/${name}`, {
      apiVersion: API_VERSION,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef },
    });
    expect([200, 201], JSON.stringify(created.body)).toContain(created.status);
  }

  async function create(name: string): Promise<string> {
    await put(name, name);
    const s = await until(
      `${name} Ready`,
      async () => {
        const s = await session(name);
        if (s.status.phase === "Failed") throw new Error(`${name} failed: ${JSON.stringify(s.status)}`);
        return s.status.phase === "Ready" ? s : undefined;
      },
      READY_MS,
    );
    workloads.set(name, s.status.containerName);
    return s.status.containerName;
  }

  const ask = (name: string, input: string) =>
    system.call("POST", `${SESSIONS}/${name}/requests`, { input }, system.adminToken);

  /** The session's MCP token and gateway URL, from its workload's environment. */
  async function mcpAccess(workload: string): Promise<{ token: string; url: string }> {
    const env = await probe.processEnv(workload);
    const value = (name: string) => env.find((e) => e.startsWith(`${name}=`))?.slice(name.length + 1) ?? "";
    const servers = JSON.parse(value("MCP_SERVERS") || "{}") as Record<string, string>;
    return { token: value("MCP_GATEWAY_TOKEN"), url: servers[SERVER] ?? "" };
  }

  /** The gateway's address, as the runner logged it when it started (the session's URL names its side of the network). */
  function gatewayAddress(): string {
    const logs = (system.runner?.logs ?? []).join("");
    const address = logs.match(/model gateway listening[^\n]*"address":"([\d.]+:\d+)"/)?.[1];
    if (!address) throw new Error("the runner did not log its gateway's address");
    return address;
  }

  /** One JSON-RPC request to the gateway's MCP path, as a session's own code could send it. */
  async function rpc(access: { token: string; url: string }, method: string, params: unknown = {}) {
    const res = await fetch(`http://${gatewayAddress()}${new URL(access.url).pathname}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${access.token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
    });
    const text = await res.text();
    const data = text.includes("data:")
      ? (text
          .split("\n")
          .find((line) => line.startsWith("data:"))
          ?.slice(5) ?? "{}")
      : text;
    return { status: res.status, body: JSON.parse(data) as Json };
  }

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    fixture = await startFixture(options.engine);
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const server = await system.call("PUT", `${NS}/mcpservers/${SERVER}`, {
      apiVersion: API_VERSION,
      kind: "MCPServer",
      metadata: { name: SERVER },
      spec: {
        url: fixture.url,
        toolsAllow: ["add", "echo", "delete_everything"],
        toolsDeny: ["delete_everything"],
        credentials: [{ name: "token", header: "Authorization", prefix: "Bearer ", value: SECRET }],
        timeout: "30s",
      },
    });
    expect(server.status, JSON.stringify(server.body)).toBe(201);
    expect(JSON.stringify(server.body)).not.toContain(SECRET);
    for (const runtime of RUNTIMES) {
      // The Agent narrows: whoami is not the server's to give, so it stays out.
      const put = await system.call(
        "PUT",
        `${NS}/agents/${sessionOf(runtime)}`,
        agent(sessionOf(runtime), runtime, [{ name: SERVER, toolsAllow: ["add", "echo", "whoami"] }]),
      );
      expect(put.status, JSON.stringify(put.body)).toBe(201);
    }
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    probe?.close();
    for (const name of [...RUNTIMES.map(sessionOf), `${prefix}-pi`, `${prefix}-missing`])
      await system?.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
    await fixture?.close();
  });

  describe(`MCP tools through the gateway (real engine: ${options.engine})`, () => {
    for (const runtime of RUNTIMES)
      it(`${runtime}: the agent calls an allowed tool, the server sees the injected credential, a tool frame is recorded`, async () => {
        const name = sessionOf(runtime);
        await create(name);
        const events = followEvents(system);
        try {
          const before = fixture.toolCalls().length;
          const reply = await ask(name, 'call tool add with {"a":20,"b":22}');
          expect(reply.status, JSON.stringify(reply.body)).toBe(200);
          expect(reply.body.outcome, JSON.stringify(reply.body)).toBe("succeeded");
          expect(JSON.stringify(reply.body.output ?? reply.body)).toContain("sum=42");
          const calls = fixture.toolCalls().slice(before);
          expect(calls.map((c) => c.tool)).toEqual(["add"]);
          expect(calls[0]?.authorization).toBe(`Bearer ${SECRET}`);
          // The model offered only the allowed tools: the denied one is not there to call.
          const denied = await ask(name, "call tool delete_everything with {}");
          expect(JSON.stringify(denied.body)).toContain("I have no tool delete_everything");
          expect(fixture.toolCalls().some((c) => c.tool === "delete_everything")).toBe(false);
          const frame = await until("a tool frame of the MCP call", () =>
            events.events.find((e) => e.data?.type === "tool" && e.data?.payload?.source === "mcp"),
          );
          expect(frame.data.payload).toMatchObject({ server: SERVER, tool: "add", outcome: "ok" });
          expect(typeof frame.data.payload.duration_ms).toBe("number");
        } finally {
          await events.close();
        }
      });

    it("through the gateway a session lists only the allowed tools, and a denied call is refused before the server", async () => {
      const workload = workloads.get(sessionOf("compass")) ?? (await create(sessionOf("compass")));
      const access = await mcpAccess(workload);
      expect(access.token).toMatch(/^asgw_/);
      expect(access.url).toContain(`/mcp/${SERVER}`);
      await rpc(access, "initialize", {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "t", version: "1" },
      });
      const listed = await rpc(access, "tools/list");
      expect(listed.body.result.tools.map((t: Json) => t.name).sort()).toEqual(["add", "echo"]);
      const before = fixture.log.length;
      for (const tool of ["delete_everything", "whoami"]) {
        const refused = await rpc(access, "tools/call", { name: tool, arguments: {} });
        expect(refused.body.error.message).toContain(`tool "${tool}" is not allowed for this session`);
      }
      // The server's own log: nothing of either call reached it.
      expect(fixture.log.length).toBe(before);
      expect(fixture.toolCalls().some((c) => c.tool === "delete_everything" || c.tool === "whoami")).toBe(
        false,
      );
      // Without the session's token the gateway answers nothing.
      expect((await rpc({ ...access, token: "asgw_not-a-token" }, "tools/list")).status).toBe(401);
    });

    it("nothing in a session holds the MCP credential, nor the MCP server's address", async () => {
      for (const runtime of RUNTIMES) {
        const workload = workloads.get(sessionOf(runtime)) ?? (await create(sessionOf(runtime)));
        const where = `${runtime} (${workload})`;
        const environs = await probe.exec(workload, [
          "sh",
          "-c",
          'for f in /proc/[0-9]*/environ; do [ "$f" = /proc/$$/environ ] || cat $f 2>/dev/null; echo; done',
        ]);
        expect(environs, where).toContain("MCP_GATEWAY_TOKEN=asgw_");
        expect(environs, where).not.toContain(SECRET);
        expect(environs, where).not.toContain(fixture.url);
        const files = await probe.exec(workload, [
          "sh",
          "-c",
          `grep -rl -e '${SECRET}' /workspace /tmp /app 2>/dev/null; echo done`,
        ]);
        expect(files.trim(), where).toBe("done");
        const spec = await probe.specText(workload);
        expect(spec, where).not.toContain(SECRET);
      }
      const logs = [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join("");
      expect(logs).not.toContain(SECRET);
      // The audit line of each call.
      expect(logs).toMatch(/"kind":"mcp_tool_call"[^\n]*"tool":"add"[^\n]*"outcome":"ok"/);
    });

    it("a stdio MCP server is refused naming the invariant, and a binding nothing can serve is Invalid with nothing provisioned", async () => {
      const stdio = await system.call("PUT", `${NS}/mcpservers/${prefix}-stdio`, {
        apiVersion: API_VERSION,
        kind: "MCPServer",
        metadata: { name: `${prefix}-stdio` },
        spec: { command: "npx", args: ["some-mcp-server"] },
      });
      expect(stdio.status).toBe(400);
      expect(stdio.body.code).toBe("INVALID_ARGUMENT");
      expect(stdio.body.message).toContain(MCP_TRANSPORT_INVARIANT);
      expect((await system.call("GET", `${NS}/mcpservers/${prefix}-stdio`)).status).toBe(404);

      // An Agent binding MCP servers to a runtime without `mcp` (pi), and one binding a server not there.
      const cases = [
        {
          name: `${prefix}-pi`,
          runtime: "pi",
          server: SERVER,
          message: /does not declare the capability mcp/,
        },
        { name: `${prefix}-missing`, runtime: "compass", server: `${prefix}-stdio`, message: /not found/ },
      ];
      for (const c of cases) {
        const put = await system.call(
          "PUT",
          `${NS}/agents/${c.name}`,
          agent(c.name, c.runtime, [{ name: c.server }]),
        );
        expect(put.status, JSON.stringify(put.body)).toBe(201);
        await put_(c.name);
        const failed = await until(
          `${c.name} Failed`,
          async () => {
            const s = await session(c.name);
            return s.status.phase === "Failed" ? s : undefined;
          },
          READY_MS,
        );
        const ready = failed.status.conditions.find((x: Json) => x.type === "Ready");
        expect(ready.reason).toBe("Invalid");
        expect(ready.message).toMatch(c.message);
        expect(failed.status.containerName ?? "").toBe("");
      }
    });
  });

  const put_ = (name: string) => put(name, name);
}
