/**
 * An in-memory engine driver for the scale benchmark only (test/bench/scale-bench.ts): the
 * runner's shared fake driver (runner/engine/fake-driver.ts) whose agents echo what they are sent,
 * each workspace at its own made-up endpoint. Provisioning and starting return at once; each
 * started agent says it is up with one `log` frame, and then emits compass.v1 frames only when
 * asked (`emit`), so the benchmark decides the load.
 */
import { FakeDriver } from "../../runner/engine/fake-driver.ts";

/** Milliseconds since the epoch with sub-millisecond precision, comparable across processes of one host. */
export function preciseNow(): number {
  return performance.timeOrigin + performance.now();
}

/** A made-up endpoint per workspace (no adapter answers there: the runner's probe is replaced). */
function endpoints(): (containerName: string) => string {
  const given = new Map<string, string>();
  return (containerName) => {
    let endpoint = given.get(containerName);
    if (endpoint === undefined) {
      endpoint = `simulated.invalid:${given.size + 1}`;
      given.set(containerName, endpoint);
    }
    return endpoint;
  };
}

export class SimulatedDriver extends FakeDriver {
  constructor() {
    super({ endpoint: endpoints(), echo: true, record: false });
  }

  /** Live agents, in start order. */
  get agentCount(): number {
    return this.agents.size;
  }

  /** The workspaces whose agents `emit` uses, in its round-robin order. */
  emitting(sessions: number): string[] {
    return [...this.agents.keys()].slice(0, Math.max(1, sessions));
  }

  /**
   * `count` `log` frames, round-robin over the first `sessions` live agents, at `perSecond`
   * (in 10 ms slices). Each payload carries `bench_seq` and `sent_at` (preciseNow()).
   */
  async emit(count: number, sessions: number, perSecond: number): Promise<{ emitted: number; ms: number }> {
    const agents = [...this.agents.values()].slice(0, Math.max(1, sessions));
    if (agents.length === 0) return { emitted: 0, ms: 0 };
    const started = preciseNow();
    let emitted = 0;
    while (emitted < count) {
      const due = Math.min(count, Math.floor(((preciseNow() - started) / 1000) * perSecond) + 1);
      for (; emitted < due; emitted++)
        agents[emitted % agents.length]?.emit("log", { bench_seq: emitted, sent_at: preciseNow() });
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return { emitted, ms: preciseNow() - started };
  }
}
