import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "./log.ts";
import { Metrics } from "./metrics.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";

type Sample = { name: string; labels: Record<string, string>; value: number };
type Exposition = { samples: Sample[]; types: Map<string, string>; helps: Set<string> };

/**
 * A strict reader of the Prometheus text exposition format 0.0.4: every line is a `# HELP`,
 * a `# TYPE`, or `name{label="value",…} number`; throws on anything else.
 */
function parseExposition(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const helps = new Set<string>();
  const sampleLine =
    /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\})? (\S+)( -?\d+)?$/;
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const help = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$/.exec(line);
    if (help?.[1]) {
      helps.add(help[1]);
      continue;
    }
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (type?.[1] && type[2]) {
      if (types.has(type[1])) throw new Error(`TYPE of ${type[1]} given twice`);
      types.set(type[1], type[2]);
      continue;
    }
    const m = sampleLine.exec(line);
    if (!m?.[1] || m[4] === undefined) throw new Error(`not Prometheus text: ${JSON.stringify(line)}`);
    const value = m[4] === "+Inf" ? Number.POSITIVE_INFINITY : m[4] === "-Inf" ? -Infinity : Number(m[4]);
    if (Number.isNaN(value) && m[4] !== "NaN") throw new Error(`bad value in ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"/g))
      labels[l[1] ?? ""] = (l[2] ?? "").replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1], labels, value });
  }
  return { samples, types, helps };
}

function value(e: Exposition, name: string, labels: Record<string, string> = {}): number | undefined {
  return e.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    ?.value;
}

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** `token` "" scrapes without one. */
async function scrape(server: TestServer, token = ADMIN_TOKEN) {
  const response = await fetch(`${server.server.url}/metrics`, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
  return { status: response.status, type: response.headers.get("content-type"), text: await response.text() };
}

describe("GET /metrics", () => {
  it("parses as Prometheus text and its RPC counter moves when RPCs flow", async () => {
    t = await startTestServer();
    const before = await scrape(t);
    expect(before.status).toBe(200);
    expect(before.type).toContain("text/plain");
    const first = parseExposition(before.text);
    expect(first.types.get("agent_sessions_rpc_requests_total")).toBe("counter");
    expect(first.types.get("agent_sessions_relay_duration_seconds")).toBe("histogram");
    expect(first.types.get("process_cpu_user_seconds_total")).toBe("counter");
    // Every state and phase is present (0 when none), so dashboards need no `or vector(0)`.
    expect(value(first, "agent_sessions_sessions", { state: "READY" })).toBe(0);
    expect(value(first, "agent_sessions_harness_sessions", { phase: "Ready" })).toBe(0);
    expect(value(first, "agent_sessions_runner_links")).toBe(0);
    const okBefore =
      value(first, "agent_sessions_rpc_requests_total", { method: "GetAgentStatus", code: "OK" }) ?? 0;

    await t.rpc("GetAgentStatus", {});
    await t.rpc("GetAgentStatus", {});
    await t.rpc("StopAgentSession", { session_id: "nope!" });
    await t.rpc("NoSuchMethod", {});

    const after = parseExposition((await scrape(t)).text);
    expect(value(after, "agent_sessions_rpc_requests_total", { method: "GetAgentStatus", code: "OK" })).toBe(
      okBefore + 2,
    );
    expect(
      value(after, "agent_sessions_rpc_requests_total", {
        method: "StopAgentSession",
        code: "INVALID_ARGUMENT",
      }),
    ).toBe(1);
    expect(value(after, "agent_sessions_rpc_requests_total", { method: "unknown", code: "NOT_FOUND" })).toBe(
      1,
    );
    expect(value(after, "agent_sessions_rpc_duration_seconds_count", { method: "GetAgentStatus" })).toBe(
      okBefore + 2,
    );
  });

  it("counts sessions by state, runner links and runner command durations", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "m-1" });
    expect(spawned.status).toBe(200);
    const e = parseExposition((await scrape(t)).text);
    expect(value(e, "agent_sessions_runner_links")).toBe(1);
    expect(value(e, "agent_sessions_sessions", { state: "READY" })).toBe(1);
    expect(
      value(e, "agent_sessions_runner_command_duration_seconds_count", { kind: "provision", code: "OK" }),
    ).toBe(1);
    expect(
      value(e, "agent_sessions_runner_command_duration_seconds_count", { kind: "start", code: "OK" }),
    ).toBe(1);
    runner.kill();
  });

  it("times the idle controller's sweeps", async () => {
    t = await startTestServer({ idleCheckMs: 50 });
    let sweeps = 0;
    for (let i = 0; i < 100 && sweeps < 2; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      sweeps =
        value(parseExposition((await scrape(t)).text), "agent_sessions_idle_sweep_duration_seconds_count") ??
        0;
    }
    expect(sweeps).toBeGreaterThanOrEqual(2);
  });

  it("takes the admin token unless AGENT_SESSIONS_METRICS_PUBLIC", async () => {
    t = await startTestServer();
    expect((await scrape(t, "")).status).toBe(401);
    await t.close();
    t = await startTestServer({ metricsPublic: true });
    expect((await scrape(t, "")).status).toBe(200);
  });

  it("echoes the caller's x-request-id, or makes one", async () => {
    t = await startTestServer();
    const given = await fetch(`${t.server.url}/healthz`, { headers: { "x-request-id": "trace-123" } });
    expect(given.headers.get("x-request-id")).toBe("trace-123");
    const made = await fetch(`${t.server.url}/v1/rpc/GetAgentStatus`, { method: "POST", body: "{}" });
    expect(made.status).toBe(401);
    expect(made.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe("Metrics", () => {
  it("leaves out a gauge whose source fails instead of failing the scrape", async () => {
    const metrics = new Metrics({ processMetrics: false, log: silentLogger });
    metrics.observe({
      sessionStates: async () => {
        throw new Error("store closed");
      },
      harnessPhases: async () =>
        new Map([
          ["Ready", 2],
          ["Stopped", 1],
        ]),
    });
    const e = parseExposition(await metrics.render());
    expect(value(e, "agent_sessions_sessions")).toBeUndefined();
    expect(value(e, "agent_sessions_harness_sessions", { phase: "Ready" })).toBe(2);
    expect(value(e, "agent_sessions_harness_sessions", { phase: "Stopped" })).toBe(1);
  });

  it("records idle sweeps in a histogram", async () => {
    const metrics = new Metrics({ processMetrics: false });
    metrics.recordIdleSweep(0.003);
    metrics.recordIdleSweep(0.2);
    const e = parseExposition(await metrics.render());
    expect(e.types.get("agent_sessions_idle_sweep_duration_seconds")).toBe("histogram");
    expect(value(e, "agent_sessions_idle_sweep_duration_seconds_count")).toBe(2);
    expect(value(e, "agent_sessions_idle_sweep_duration_seconds_bucket", { le: "0.005" })).toBe(1);
    expect(value(e, "agent_sessions_idle_sweep_duration_seconds_bucket", { le: "0.25" })).toBe(2);
    expect(value(e, "agent_sessions_idle_sweep_duration_seconds_sum")).toBeCloseTo(0.203);
  });

  it("records proxied requests by outcome with their latency", async () => {
    const metrics = new Metrics({ processMetrics: false });
    metrics.recordProxiedRequest("succeeded", true, 0.3);
    metrics.recordProxiedRequest("rejected", false, 0.001);
    const e = parseExposition(await metrics.render());
    expect(value(e, "agent_sessions_proxied_requests_total", { outcome: "succeeded" })).toBe(1);
    expect(
      value(e, "agent_sessions_relay_duration_seconds_bucket", {
        outcome: "succeeded",
        stream: "true",
        le: "0.5",
      }),
    ).toBe(1);
    expect(
      value(e, "agent_sessions_relay_duration_seconds_bucket", {
        outcome: "succeeded",
        stream: "true",
        le: "0.25",
      }),
    ).toBe(0);
  });
});
