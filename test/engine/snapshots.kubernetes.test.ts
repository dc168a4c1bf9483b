/**
 * Snapshots on the test bed's real cluster at the driver level (runner/kubernetes/snapshots.ts):
 * a session's files (nested, a symlink, a 0600 file of uid 65532) are taken into a snapshot PVC
 * by a copy pod, read back as a tar under `volume/`, imported from that tar into another PVC,
 * restored into the stopped session (what came after is gone) and seeded into a fork's first
 * provision; remove leaves no PVC and no stack. The files are looked at in the pods' `workspace`
 * sidecar, as uid 65532 sees them.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig, NetworkingV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WORKSPACE_CONTAINER } from "../../contracts/session-pod.ts";
import { SnapshotLabels, snapshotStorageName } from "../../contracts/session-snapshot.ts";
import {
  type SessionSpec,
  SessionSpec as SessionSpecSchema,
  type SnapshotStorage,
  workloadName,
} from "../../contracts/session-spec.ts";
import { SNAPSHOT_COPY_COMPONENT } from "../../infra/kubernetes/copy-pod.ts";
import type { DriverLog } from "../../runner/engine/fast-path.ts";
import { KubernetesDriver } from "../../runner/kubernetes/driver.ts";
import type { KubernetesSnapshots } from "../../runner/kubernetes/snapshots.ts";
import { StackManager } from "../../stacks/index.ts";
import { kubectl } from "../support/control-plane.ts";
import { applyTestbedEnv, builtImage, referenceImage, sessionHostAddress } from "../support/testbed.ts";
import { untilSeconds as until } from "../support/until.ts";

applyTestbedEnv();

const suffix = randomBytes(3).toString("hex");
const k8sNamespace = `engine-ksnap-${suffix}`;
const sessionNamespace = "engine";
const original = `snap-${suffix}`;
const fork = `fork-${suffix}`;
const forkFull = `forkf-${suffix}`;
const secrets = { credentials: { MODEL_API_KEY: `sk-${suffix}` }, adapterToken: `adapter-${suffix}` };
const dataDir = mkdtempSync(join(tmpdir(), "kubernetes-snapshots-"));

const kc = new KubeConfig();
let core: CoreV1Api;
let networking: NetworkingV1Api;
let stacks: StackManager;
let driver: KubernetesDriver;
let snapshots: KubernetesSnapshots;

/** The snapshot stacks' recordings that failed (the driver logs them; the answer never waits for them). */
const recordingFailures: string[] = [];
/** A copy's notices: a restore's or a seed's sync that fell back to the full replace says so. */
const copyNotices: string[] = [];
const driverLog: DriverLog = (level, msg, fields) => {
  if (msg === "recording a snapshot's stack failed") recordingFailures.push(JSON.stringify(fields));
  if (msg.endsWith(": notice")) copyNotices.push(`${msg} ${JSON.stringify(fields)}`);
  if (level === "warn" || level === "error")
    console.log(`driver ${level}: ${msg} ${JSON.stringify(fields ?? {})}`);
};

function spec(name: string, seedSnapshot?: SnapshotStorage): SessionSpec {
  return SessionSpecSchema.parse({
    namespace: sessionNamespace,
    name,
    engine: "kubernetes",
    image: referenceImage().image,
    contract: "v1alpha2",
    resources: { cpu: "250m", memoryMiB: 256, storageMiB: 64 },
    kubernetes: { namespace: k8sNamespace },
    ...(seedSnapshot ? { seedSnapshot } : {}),
  });
}

function storage(name: string): SnapshotStorage {
  return {
    storage: snapshotStorageName(sessionNamespace, name),
    namespace: sessionNamespace,
    name,
    kubernetes: { namespace: k8sNamespace },
  };
}

/** A script in the session's `workspace` sidecar (uid 65532, the volume at /workspace). */
async function sh(session: string, script: string): Promise<string> {
  const r = await kubectl(
    ...["-n", k8sNamespace, "exec", `deploy/${workloadName(sessionNamespace, session)}`],
    ...["-c", WORKSPACE_CONTAINER, "--", "sh", "-c", script],
  );
  if (r.code !== 0) throw new Error(`${script} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

/** Every entry under /workspace: type, mode, owner, size (files), path, link target; sorted. */
async function listing(session: string): Promise<string[]> {
  const out = await sh(
    session,
    `cd /workspace && find . -mindepth 1 \\( -type d -printf '%y %m %U - %P %l\\n' \\) -o -printf '%y %m %U %s %P %l\\n'`,
  );
  return out.split("\n").filter(Boolean).sort();
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "resolved";
  } catch (e) {
    return String((e as { code?: string }).code ?? (e as Error).message);
  }
}

async function collect(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** `tar -tv` of a tar: "mode owner size path[ -> target]" per entry, sorted. */
function tarListing(tar: Buffer): string[] {
  const dir = mkdtempSync(join(tmpdir(), "snapshot-tar-"));
  try {
    const file = join(dir, "s.tar");
    writeFileSync(file, tar);
    const out = execFileSync("tar", ["--numeric-owner", "-tvf", file], { encoding: "utf8" });
    return out
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        const [mode = "", owner = "", size = "", , , ...rest] = line.split(/\s+/);
        return `${mode} ${owner} ${mode.startsWith("d") ? "-" : size} ${rest.join(" ")}`;
      })
      .sort();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function snapshotPvcs(): Promise<string[]> {
  const pvcs = await core.listNamespacedPersistentVolumeClaim({
    namespace: k8sNamespace,
    labelSelector: SnapshotLabels.snapshot,
  });
  return pvcs.items.map((p) => p.metadata?.name ?? "");
}

/** The copy pods not being deleted and the copy NetworkPolicies left in the namespace. */
async function liveCopyObjects(): Promise<{ pods: string[]; policies: string[] }> {
  const labelSelector = `agent-sessions.dev/component=${SNAPSHOT_COPY_COMPONENT}`;
  const [pods, policies] = await Promise.all([
    core.listNamespacedPod({ namespace: k8sNamespace, labelSelector }),
    networking.listNamespacedNetworkPolicy({ namespace: k8sNamespace, labelSelector }),
  ]);
  return {
    pods: pods.items.filter((p) => !p.metadata?.deletionTimestamp).map((p) => p.metadata?.name ?? ""),
    policies: policies.items.map((p) => p.metadata?.name ?? ""),
  };
}

const FILES = `set -e; cd /workspace
mkdir -p src/deep/er .hidden
printf 'hello\\n' > src/deep/er/hello.txt
printf 'dot\\n' > .hidden/config
ln -s deep/er/hello.txt src/link
printf 'secret\\n' > secret.txt; chmod 600 secret.txt
head -c 100000 /dev/urandom > src/blob.bin`;

beforeAll(async () => {
  if (!process.env.KUBECONFIG) throw new Error("KUBECONFIG unset: run scripts/testbed up kubernetes");
  kc.loadFromDefault();
  core = kc.makeApiClient(CoreV1Api);
  networking = kc.makeApiClient(NetworkingV1Api);
  stacks = await StackManager.create(
    { dataDir, env: { KUBECONFIG: process.env.KUBECONFIG } },
    { log: (level, msg, fields) => level !== "info" && console.error(level, msg, fields) },
  );
  driver = new KubernetesDriver(kc, stacks, {
    namespace: k8sNamespace,
    runnerCidr: `${sessionHostAddress("kubernetes")}/32`,
    workspaceImage: builtImage("base-image").image,
    log: driverLog,
  });
  if (!driver.snapshots) throw new Error("the driver has no snapshots with a git image");
  snapshots = driver.snapshots;
}, 60_000);

afterAll(async () => {
  for (const name of [original, fork, forkFull])
    await driver?.remove(workloadName(sessionNamespace, name)).catch((e: unknown) => console.error(e));
  for (const name of ["first", "imported"])
    await snapshots?.remove(storage(name)).catch((e: unknown) => console.error(e));
  await core?.deleteNamespace({ name: k8sNamespace }).catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
}, 180_000);

describe("snapshots on Kubernetes", () => {
  const container = workloadName(sessionNamespace, original);
  let before: string[] = [];
  let tar: Buffer = Buffer.alloc(0);

  it("take copies the running session's files, modes and owner kept, and records its stack behind", async () => {
    await driver.provision(container, spec(original), secrets);
    await sh(original, FILES);
    before = await listing(original);
    expect(before).toEqual(
      expect.arrayContaining([
        "f 600 65532 7 secret.txt ",
        "l 777 65532 17 src/link deep/er/hello.txt",
        "f 644 65532 6 src/deep/er/hello.txt ",
      ]),
    );
    const taken = await snapshots.take(container, storage("first"));
    expect(taken.sizeBytes).toBe(7 + 6 + 4 + 100_000);
    expect(await codeOf(snapshots.take(container, storage("first")))).toBe("ALREADY_EXISTS");
    // The copy pod is gone (or going) once take answered, and its NetworkPolicy gone.
    const pods = await core.listNamespacedPod({
      namespace: k8sNamespace,
      labelSelector: `agent-sessions.dev/component=${SNAPSHOT_COPY_COMPONENT}`,
    });
    expect(pods.items.filter((p) => !p.metadata?.deletionTimestamp)).toEqual([]);
    const policies = await networking.listNamespacedNetworkPolicy({
      namespace: k8sNamespace,
      labelSelector: `agent-sessions.dev/component=${SNAPSHOT_COPY_COMPONENT}`,
    });
    expect(policies.items).toEqual([]);
    await snapshots.settled(storage("first").storage);
    expect(await snapshotPvcs()).toEqual([storage("first").storage]);
    // Recorded: the snapshot's stack holds the PVC the runner made (adopted, not made again).
    expect(await stacks.snapshotExists(sessionNamespace, "first")).toBe(true);
    expect(recordingFailures).toEqual([]);
  }, 240_000);

  it("read streams the snapshot as a tar, every entry under volume/, without what came after", async () => {
    await sh(original, "echo later > /workspace/later.txt && rm /workspace/secret.txt");
    tar = await collect(await snapshots.read(storage("first"), 10 * 1024 * 1024));
    const entries = tarListing(tar);
    expect(entries.every((e) => e.split(" ")[3]?.startsWith("volume/"))).toBe(true);
    expect(entries).toEqual(
      expect.arrayContaining([
        "-rw------- 65532/65532 7 volume/secret.txt",
        "lrwxrwxrwx 65532/65532 0 volume/src/link -> deep/er/hello.txt",
        "-rw-r--r-- 65532/65532 6 volume/src/deep/er/hello.txt",
        "-rw-r--r-- 65532/65532 4 volume/.hidden/config",
      ]),
    );
    expect(entries.some((e) => e.includes("later.txt"))).toBe(false);
    expect(await codeOf(collect(await snapshots.read(storage("first"), 50_000)))).toBe("RESOURCE_EXHAUSTED");
    expect(await codeOf(snapshots.read(storage("absent"), 1_000))).toBe("NOT_FOUND");
  }, 120_000);

  it("write makes a snapshot from that tar with the same files", async () => {
    const made = await snapshots.write(storage("imported"), {
      size: tar.length,
      open: async function* () {
        yield tar;
      },
    });
    expect(made.sizeBytes).toBe(7 + 6 + 4 + 100_000);
    const again = tarListing(await collect(await snapshots.read(storage("imported"), 10 * 1024 * 1024)));
    expect(again).toEqual(tarListing(tar));
  }, 120_000);

  it("restore is refused while the session runs, then returns the stopped session to the snapshot", async () => {
    // A copy pod readied ahead (as the server asks before it stops the session) copies nothing by
    // itself, and a refused restore deletes it.
    snapshots.prepareRestore(container, storage("first"));
    expect(await codeOf(snapshots.restore(container, storage("first")))).toBe("FAILED_PRECONDITION");
    expect(await liveCopyObjects()).toEqual({ pods: [], policies: [] });
    expect(await listing(original)).toContain("f 644 65532 6 later.txt ");
    // Readied while the session still runs, taken by the restore once it is stopped.
    snapshots.prepareRestore(container, storage("first"));
    await driver.scaleDown(container);
    copyNotices.length = 0;
    await snapshots.restore(container, storage("first"));
    // By the sync (only what differs), not its fallback (runner/engine/volume-sync-script.ts).
    expect(copyNotices).toEqual([]);
    expect(await liveCopyObjects()).toEqual({ pods: [], policies: [] });
    await driver.provision(container, spec(original), secrets);
    expect(await listing(original)).toEqual(before);
  }, 240_000);

  it("a provision with seedSnapshot starts with the snapshot's files, once", async () => {
    const forkContainer = workloadName(sessionNamespace, fork);
    copyNotices.length = 0;
    const result = await driver.provision(forkContainer, spec(fork, storage("imported")), secrets);
    expect(result.seededSnapshot).toBe(storage("imported").storage);
    expect(copyNotices).toEqual([]);
    expect(await listing(fork)).toEqual(before);
    // Diverged: a file written in the fork is not in the original.
    await sh(fork, "echo mine > /workspace/fork-only.txt");
    expect((await listing(original)).some((e) => e.includes("fork-only.txt"))).toBe(false);
    // A resume never re-seeds.
    await driver.scaleDown(forkContainer);
    const resumed = await driver.provision(forkContainer, spec(fork, storage("imported")), secrets);
    expect(resumed.seededSnapshot).toBeUndefined();
    expect(await listing(fork)).toContain("f 644 65532 5 fork-only.txt ");
  }, 300_000);

  it("a fork through the full path (no fast create): the stack's `up` adopts the seeded PVC", async () => {
    const full = new KubernetesDriver(kc, stacks, {
      namespace: k8sNamespace,
      runnerCidr: `${sessionHostAddress("kubernetes")}/32`,
      workspaceImage: builtImage("base-image").image,
      fastCreate: false,
      log: driverLog,
    });
    const fullContainer = workloadName(sessionNamespace, forkFull);
    const result = await full.provision(fullContainer, spec(forkFull, storage("first")), secrets);
    expect(result.seededSnapshot).toBe(storage("first").storage);
    expect(await listing(forkFull)).toEqual(before);
    expect(await stacks.exists(sessionNamespace, forkFull)).toBe(true);
    await full.remove(fullContainer);
  }, 300_000);

  it("remove frees the storage: no PVC, no stack; a second remove finds nothing", async () => {
    expect(await snapshots.remove(storage("first"))).toBe(true);
    expect(await snapshots.remove(storage("imported"))).toBe(true);
    await until("the snapshot PVCs gone", 60, async () =>
      (await snapshotPvcs()).length === 0 ? true : undefined,
    );
    expect(await snapshots.remove(storage("first"))).toBe(false);
    expect(await stacks.snapshotExists(sessionNamespace, "first")).toBe(false);
    expect(await stacks.snapshotExists(sessionNamespace, "imported")).toBe(false);
  }, 180_000);
});
