import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { toMetrics } from "./metrics.ts";

const info = (host: Partial<Docker.HostConfig>) =>
  ({
    State: { StartedAt: "2026-12-06T08:00:00.000Z" },
    HostConfig: host,
  }) as Pick<Docker.ContainerInspectInfo, "State" | "HostConfig">;

describe("toMetrics (Docker stats)", () => {
  it("CPU as docker stats computes it, memory less the inactive file cache, networks summed, limits", () => {
    const m = toMetrics(
      info({ NanoCpus: 500_000_000, Memory: 512 * 1024 * 1024 }),
      {
        read: "2026-12-06T09:00:01.000Z",
        preread: "2026-12-06T09:00:00.000Z",
        // 0.25 s of the container's CPU time while the host's 2 CPUs ran 2 s.
        cpu_stats: {
          cpu_usage: { total_usage: 1_250_000_000 },
          system_cpu_usage: 12_000_000_000,
          online_cpus: 2,
        },
        precpu_stats: { cpu_usage: { total_usage: 1_000_000_000 }, system_cpu_usage: 10_000_000_000 },
        memory_stats: { usage: 50_000_000, stats: { total_inactive_file: 10_000_000 } },
        networks: { eth0: { rx_bytes: 100, tx_bytes: 50 }, eth1: { rx_bytes: 1, tx_bytes: 2 } },
      },
      4096,
    );
    expect(m).toEqual({
      since: "2026-12-06T08:00:00.000Z",
      sampledAt: "2026-12-06T09:00:01.000Z",
      cpu: { cores: 0.25, limitCores: 0.5, windowMs: 1000 },
      memory: { bytes: 40_000_000, limitBytes: 512 * 1024 * 1024 },
      network: { rxBytes: 101, txBytes: 52 },
      volume: { usedBytes: 4096 },
    });
  });

  it("no limits and no volume figure (a frozen workload) are left out", () => {
    const m = toMetrics(info({}), { memory_stats: { usage: 10 } }, undefined);
    expect(m.cpu.limitCores).toBeUndefined();
    expect(m.memory).toEqual({ bytes: 10 });
    expect(m.volume).toBeUndefined();
    expect(m.cpu.cores).toBe(0);
  });
});
