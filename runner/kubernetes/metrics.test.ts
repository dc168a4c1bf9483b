import { describe, expect, it } from "vitest";
import { parseMetricsOutput } from "./metrics.ts";

const at = new Date("2026-12-06T09:00:00.000Z");
const since = "2026-12-06T08:00:00.000Z";
const netDev = [
  "net Inter-|   Receive                                                |  Transmit",
  "net  face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed",
  "net     lo:    5000      50    0    0    0     0          0         0     5000      50    0    0    0     0       0          0",
  "net   eth0:  120000     300    0    0    0     0          0         0    34000     200    0    0    0     0       0          0",
];

describe("parseMetricsOutput", () => {
  it("reads cgroup v2: CPU over the two samples, working set, limits, network without lo, volume", () => {
    const text = [
      "uptime 1000.00 1800.00",
      "cpu_usec 2000000",
      "uptime 1001.00 1801.00",
      "cpu_usec 2400000",
      "mem 104857600",
      "mem_max 536870912",
      "inactive 4194304",
      "cpu_max 50000 100000",
      ...netDev,
      "du 2048\t/workspace",
    ].join("\n");
    expect(parseMetricsOutput(text, since, at)).toEqual({
      since,
      sampledAt: at.toISOString(),
      cpu: { cores: 0.4, limitCores: 0.5, windowMs: 1000 },
      memory: { bytes: 96 * 1024 * 1024, limitBytes: 512 * 1024 * 1024 },
      network: { rxBytes: 120000, txBytes: 34000 },
      volume: { usedBytes: 2048 * 1024 },
    });
  });

  it("reads cgroup v1, with no limits as v1 says it", () => {
    const text = [
      "uptime 50.00 90.00",
      "cpu_ns 1000000000",
      "uptime 51.00 91.00",
      "cpu_ns 1100000000",
      "mem 20971520",
      "mem_max 9223372036854771712",
      "inactive 0",
      "cpu_max -1 100000",
      ...netDev,
      "du ",
    ].join("\n");
    const m = parseMetricsOutput(text, since, at);
    expect(m.cpu).toEqual({ cores: 0.1, windowMs: 1000 });
    expect(m.memory).toEqual({ bytes: 20971520 });
    expect(m.volume).toBeUndefined();
  });

  it("says 0 cores when the counter went back (a restart between the samples)", () => {
    const text = ["uptime 1.00 1", "cpu_ns 900", "uptime 2.00 2", "cpu_ns 100", "mem 1"].join("\n");
    expect(parseMetricsOutput(text, since, at).cpu.cores).toBe(0);
  });
});
