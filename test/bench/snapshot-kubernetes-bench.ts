/**
 * Snapshots on Kubernetes (issue 38's targets: snapshot ≤ 3 s, fork and restore ≤ 6 s) at the
 * driver level, beside a baseline measured in the same run:
 *
 *   node test/bench/snapshot-kubernetes-bench.ts [runs]   (default 3; the test bed's kubernetes,
 *                                                          pulumi, reference and base images up)
 *
 * One reference session (runner/kubernetes/driver.ts, the real StackManager and cluster) whose
 * workspace holds 50 MB in 500 files (100 KiB of random bytes each, in 10 directories). Per run:
 *
 *   baseline        a hardened pod of the git image with no volume created, Running, deleted
 *                   (what every copy pod costs before it copies anything)
 *   take            snapshots.take of the running session → the copy is whole
 *   read            snapshots.read, the whole tar taken (MB/s of tar beside it)
 *   write           snapshots.write of that tar into a new storage (an import)
 *   restore         stop (scaleDown) + snapshots.restore + resume (provision → Ready): the server's
 *                   `:restore`, request → Ready; the restore alone beside it
 *   fork            provision of a new session with seedSnapshot → Ready (the seed's copy inside),
 *                   beside the provision of a new session without one (its own baseline)
 *
 * Every run's snapshots and fork are removed (not timed). Percentiles are nearest-rank.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { WORKSPACE_CONTAINER } from "../../contracts/session-pod.ts";
import { snapshotStorageName } from "../../contracts/session-snapshot.ts";
import {
  type SessionSpec,
  SessionSpec as SessionSpecSchema,
  type SnapshotStorage,
  workloadName,
} from "../../contracts/session-spec.ts";
import { copyPodManifest } from "../../infra/kubernetes/copy-pod.ts";
import { KubernetesDriver } from "../../runner/kubernetes/driver.ts";
import { StackManager } from "../../stacks/index.ts";
import { kubectl } from "../support/control-plane.ts";
import { applyTestbedEnv, builtImage, referenceImage, sessionHostAddress } from "../support/testbed.ts";
import { p50, percentile } from "./stats.ts";

applyTestbedEnv();
const runs = Number(process.argv[2] ?? 3);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);

const suffix = randomBytes(3).toString("hex");
const k8sNamespace = `bench-ksnap-${suffix}`;
const ns = "bench";
const original = `snapb-${suffix}`;
const container = workloadName(ns, original);
const secrets = { credentials: { MODEL_API_KEY: `sk-${suffix}` }, adapterToken: `adapter-${suffix}` };
const dataDir = mkdtempSync(join(tmpdir(), "snapshot-bench-"));
const gitImage = builtImage("base-image").image;

const samples: Record<string, number[]> = {};
const add = (step: string, ms: number) => {
  samples[step] ??= [];
  samples[step].push(ms);
};

const kc = new KubeConfig();
kc.loadFromDefault();
const core = kc.makeApiClient(CoreV1Api);
const stacks = await StackManager.create(
  { dataDir, env: { KUBECONFIG: process.env.KUBECONFIG ?? "" } },
  { log: (level, msg, fields) => level === "error" && console.error(level, msg, fields) },
);
const driver = new KubernetesDriver(kc, stacks, {
  namespace: k8sNamespace,
  runnerCidr: `${sessionHostAddress("kubernetes")}/32`,
  workspaceImage: gitImage,
  log: (level, msg, fields) => {
    // The copy pods' own timings (runner/kubernetes/snapshots.ts): pod start and the copy in it.
    if (msg === "snapshot copy pod done" && fields) {
      add(`  ${fields.what} pod start`, Number(fields.start_ms));
      add(`  ${fields.what} work in pod`, Number(fields.work_ms));
    } else if (level !== "info") console.error(`driver ${level}: ${msg}`, fields ?? {});
  },
});
const snapshots = driver.snapshots;
if (!snapshots) throw new Error("no snapshots without a git image");

function spec(name: string, seedSnapshot?: SnapshotStorage): SessionSpec {
  return SessionSpecSchema.parse({
    namespace: ns,
    name,
    engine: "kubernetes",
    image: referenceImage().image,
    contract: "v1alpha2",
    resources: { cpu: "250m", memoryMiB: 256, storageMiB: 256 },
    kubernetes: { namespace: k8sNamespace },
    ...(seedSnapshot ? { seedSnapshot } : {}),
  });
}
const storage = (name: string): SnapshotStorage => ({
  storage: snapshotStorageName(ns, name),
  namespace: ns,
  name,
  kubernetes: { namespace: k8sNamespace },
});

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const value = await fn();
  return [performance.now() - t0, value];
}

/** A hardened pod with no volume, Running, then deleted: the floor under every copy. */
async function baselinePod(): Promise<void> {
  const name = `bench-empty-${randomBytes(4).toString("hex")}`;
  const body = copyPodManifest({ name, namespace: k8sNamespace, image: gitImage, mounts: [] });
  await core.createNamespacedPod({ namespace: k8sNamespace, body });
  for (;;) {
    const pod = await core.readNamespacedPod({ name, namespace: k8sNamespace });
    if (pod.status?.phase === "Running" && pod.status.containerStatuses?.[0]?.state?.running) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await core.deleteNamespacedPod({ name, namespace: k8sNamespace, gracePeriodSeconds: 0 });
}

try {
  await driver.provision(container, spec(original), secrets);
  const fill = await kubectl(
    ...["-n", k8sNamespace, "exec", `deploy/${container}`, "-c", WORKSPACE_CONTAINER, "--", "sh", "-c"],
    "cd /workspace && for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p d$d; i=0; while [ $i -lt 50 ]; do head -c 102400 /dev/urandom > d$d/f$i; i=$((i+1)); done; done; du -sb --apparent-size .",
  );
  if (fill.code !== 0) throw new Error(`fill failed: ${fill.stderr}`);
  console.log(`workspace filled: ${fill.stdout.trim()}`);
  // Warm-up (image on the node, first pods): not counted.
  await baselinePod();

  for (let run = 0; run < runs; run++) {
    const taken = storage(`t${run}-${suffix}`);
    const imported = storage(`i${run}-${suffix}`);
    const forkName = `snapf${run}-${suffix}`;
    const plainName = `snapp${run}-${suffix}`;
    try {
      add("baseline pod", (await timed(baselinePod))[0]);
      const [takeMs, size] = await timed(() => snapshots.take(container, taken));
      add("take", takeMs);
      const [readMs, tar] = await timed(async () => {
        const chunks: Buffer[] = [];
        for await (const c of await snapshots.read(taken, 1 << 30)) chunks.push(c);
        return Buffer.concat(chunks);
      });
      add("read", readMs);
      add("read MB/s", tar.length / 1e6 / (readMs / 1000));
      const [writeMs] = await timed(() =>
        snapshots.write(imported, {
          size: tar.length,
          open: async function* () {
            yield tar;
          },
        }),
      );
      add("write", writeMs);
      add("write MB/s", tar.length / 1e6 / (writeMs / 1000));
      const [stopMs] = await timed(() => driver.scaleDown(container));
      const [restoreMs] = await timed(() => snapshots.restore(container, taken));
      const [resumeMs] = await timed(() => driver.provision(container, spec(original), secrets));
      add("restore (stop+restore+resume)", stopMs + restoreMs + resumeMs);
      add("  stop", stopMs);
      add("  restore alone", restoreMs);
      add("  resume", resumeMs);
      const [forkMs] = await timed(() =>
        driver.provision(workloadName(ns, forkName), spec(forkName, imported), secrets),
      );
      add("fork (provision with seed → Ready)", forkMs);
      const [createMs] = await timed(() =>
        driver.provision(workloadName(ns, plainName), spec(plainName), secrets),
      );
      add("  baseline: create without seed → Ready", createMs);
      if (run === 0) console.log(`snapshot ${size.sizeBytes} bytes, tar ${tar.length} bytes`);
    } finally {
      await driver.remove(workloadName(ns, forkName)).catch((e: unknown) => console.error(e));
      await driver.remove(workloadName(ns, plainName)).catch((e: unknown) => console.error(e));
      await snapshots.remove(taken).catch((e: unknown) => console.error(e));
      await snapshots.remove(imported).catch((e: unknown) => console.error(e));
    }
  }
} finally {
  await driver.remove(container).catch((e: unknown) => console.error(e));
  await core.deleteNamespace({ name: k8sNamespace }).catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
}

console.log(`\nsnapshots on Kubernetes, ${runs} run(s), 50 MB in 500 files (ms unless MB/s)`);
for (const [step, values] of Object.entries(samples))
  console.log(
    `${step.padEnd(38)} p50 ${p50(values).toFixed(0).padStart(6)}  max ${percentile(values, 100).toFixed(0).padStart(6)}  all ${values.map((v) => v.toFixed(0)).join(" ")}`,
  );
