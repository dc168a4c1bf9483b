import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { SessionMetricsReply } from "../../contracts/session-metrics.ts";
import { type SeriesCandidate, SessionSeries } from "./session-series.ts";

function reply(namespace: string, name: string, cores: number, paused = false): SessionMetricsReply {
  return {
    namespace,
    name,
    phase: paused ? "Paused" : "Ready",
    engine: "docker",
    metrics: {
      since: "2026-12-06T10:00:00.000Z",
      sampledAt: "2026-12-06T10:01:00.000Z",
      cpu: { cores, limitCores: 0.5, windowMs: 1000 },
      memory: { bytes: 1_000_000, limitBytes: 512 * 1024 * 1024 },
      network: { rxBytes: 10, txBytes: 20 },
      ...(paused ? {} : { volume: { usedBytes: 4096 } }),
    },
  };
}

function seriesOver(sessions: SeriesCandidate[], options: { max?: number; failing?: string } = {}) {
  const registry = new Registry();
  const reads: string[] = [];
  const series = new SessionSeries({
    registry,
    list: async () => sessions,
    read: async (namespace, name) => {
      reads.push(`${namespace}/${name}`);
      if (name === options.failing) throw new Error("runner away");
      return reply(
        namespace,
        name,
        name.length / 10,
        sessions.find((s) => s.name === name)?.phase === "Paused",
      );
    },
    intervalMs: 60_000,
    maxSessions: options.max ?? 10,
  });
  return { registry, reads, series };
}

describe("SessionSeries", () => {
  it("shows each Ready or Paused session's last sample under its namespace and name, and reads no other", async () => {
    const { registry, reads, series } = seriesOver([
      { namespace: "team", name: "alpha", phase: "Ready" },
      { namespace: "team", name: "pz", phase: "Paused" },
      { namespace: "team", name: "gone", phase: "Stopped" },
      { namespace: "team", name: "new", phase: "Pending" },
    ]);
    await series.sample();
    expect(reads.sort()).toEqual(["team/alpha", "team/pz"]);
    const text = await registry.metrics();
    expect(text).toContain('agent_sessions_session_cpu_cores{namespace="team",name="alpha"} 0.5');
    expect(text).toContain('agent_sessions_session_memory_limit_bytes{namespace="team",name="pz"} 536870912');
    expect(text).toContain('agent_sessions_session_volume_used_bytes{namespace="team",name="alpha"} 4096');
    // A paused workload's volume cannot be looked into: no series rather than a 0.
    expect(text).not.toContain('agent_sessions_session_volume_used_bytes{namespace="team",name="pz"}');
    expect(text).not.toContain('name="gone"');
    expect(text).toContain("agent_sessions_session_series_omitted 0");
  });

  it("bounds the series to the first sessions by namespace and name and counts the rest", async () => {
    const { registry, reads, series } = seriesOver(
      [
        { namespace: "b", name: "one", phase: "Ready" },
        { namespace: "a", name: "two", phase: "Ready" },
        { namespace: "a", name: "one", phase: "Ready" },
      ],
      { max: 2 },
    );
    await series.sample();
    expect(reads.sort()).toEqual(["a/one", "a/two"]);
    const text = await registry.metrics();
    expect(text).not.toContain('namespace="b"');
    expect(text).toContain("agent_sessions_session_series_omitted 1");
  });

  it("drops the series of a session that stopped or could not be read at the next pass", async () => {
    const sessions: SeriesCandidate[] = [
      { namespace: "team", name: "alpha", phase: "Ready" },
      { namespace: "team", name: "beta", phase: "Ready" },
    ];
    const { registry, series } = seriesOver(sessions, { failing: "beta" });
    await series.sample();
    let text = await registry.metrics();
    expect(text).toContain('name="alpha"');
    expect(text).not.toContain('name="beta"');
    sessions[0] = { namespace: "team", name: "alpha", phase: "Stopped" };
    await series.sample();
    text = await registry.metrics();
    expect(text).not.toContain('name="alpha"');
  });
});
