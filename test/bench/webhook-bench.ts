/**
 * What webhooks cost a session's status writes (issue 40): every controller writes status through
 * the observed HarnessStore (proxy/webhooks/session-transitions.ts), which reads the session before
 * a write that touches its phase, conditions or restart count, to tell the transition. Measured
 * beside the plain store in the same run, on one SQLite file: phase flips of `sessions` sessions,
 * per write (p50, p99, mean). Then the dispatcher's enqueue (what a transition costs the
 * controller once told) with a receiver that never answers, up to its queue bound.
 *
 * `node test/bench/webhook-bench.ts [sessions=500] [rounds=10]`
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "../../proxy/observability/log.ts";
import type { HarnessStore } from "../../proxy/store/harness-store.ts";
import { SqliteHarnessStore } from "../../proxy/store/sqlite-harness-store.ts";
import { observedHarnessStore } from "../../proxy/webhooks/session-transitions.ts";
import { WebhookDispatcher } from "../../proxy/webhooks/webhook-dispatcher.ts";
import { generateWebhookSecret } from "../../proxy/webhooks/webhooks.ts";
import { p50, percentile } from "./stats.ts";

const sessions = Number(process.argv[2] ?? 500);
const rounds = Number(process.argv[3] ?? 10);
const dir = mkdtempSync(join(tmpdir(), "webhook-bench-"));

async function flips(store: HarnessStore, prefix: string): Promise<number[]> {
  const names = Array.from({ length: sessions }, (_, i) => `${prefix}-${i}`);
  for (const name of names)
    await store.createHarnessSession({
      namespace: "default",
      name,
      uid: randomUUID(),
      spec: { agentRef: "a", runtimeRef: "reference", desiredState: "running" } as never,
      conditions: [],
    });
  const times: number[] = [];
  for (let round = 0; round < rounds; round++)
    for (const name of names) {
      const phase = round % 2 === 0 ? "Ready" : "Pending";
      const condition = {
        type: "Ready",
        status: phase === "Ready" ? ("True" as const) : ("False" as const),
        reason: phase === "Ready" ? "SessionReady" : "Starting",
        message: phase,
        lastTransitionTime: new Date().toISOString(),
      };
      const t0 = performance.now();
      await store.setObserved("default", name, { phase, conditions: [condition] });
      times.push(performance.now() - t0);
    }
  return times;
}

const fmt = (ms: number) => `${(ms * 1000).toFixed(0)} µs`;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const store = new SqliteHarnessStore(join(dir, "harness.db"));
try {
  let told = 0;
  const plain = await flips(store, "plain");
  const observed = await flips(
    observedHarnessStore(store, () => {
      told++;
    }),
    "observed",
  );
  console.log(`status writes (phase flips), ${sessions} sessions × ${rounds} rounds, SQLite file:`);
  for (const [label, xs] of [
    ["plain store (baseline)", plain],
    ["observed store (webhooks)", observed],
  ] as const)
    console.log(
      `  ${label.padEnd(26)} p50 ${fmt(p50(xs))}  p99 ${fmt(percentile(xs, 99))}  mean ${fmt(mean(xs))}`,
    );
  console.log(`  transitions told: ${told} (created ${sessions} + ready/Pending flips that are events)`);

  const dispatcher = new WebhookDispatcher({
    log: silentLogger,
    send: () => new Promise(() => undefined), // a receiver that never answers
  });
  const target = {
    uid: "default/bench@0",
    namespace: "default",
    name: "bench",
    url: "http://192.0.2.1/",
    secret: generateWebhookSecret(),
  };
  const enqueues: number[] = [];
  for (let i = 0; i < 10_000; i++) {
    const t0 = performance.now();
    dispatcher.enqueue(target, {
      type: "ready",
      timestamp: new Date().toISOString(),
      data: {
        session: { namespace: "default", name: `s${i % 500}`, uid: `u${i % 500}` },
        reason: "SessionReady",
        message: "",
      },
    });
    enqueues.push(performance.now() - t0);
  }
  console.log(
    `enqueue, receiver never answering, 10,000 messages over 500 sessions: p50 ${fmt(p50(enqueues))}  p99 ${fmt(percentile(enqueues, 99))}  queued ${dispatcher.queued}`,
  );
  dispatcher.close();
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
// The never-answering sends keep nothing open, but say so plainly: the benchmark is done.
process.exit(0);
