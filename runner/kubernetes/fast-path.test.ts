/**
 * The Kubernetes driver's stop/resume fast path against an in-process fake API server (port 0)
 * and a fake stack manager: which path each operation takes, what it asks the cluster, and that
 * the stack records every change the fast path made, in the background, before the next operation.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Labels, SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import type { StackManager } from "../../stacks/index.ts";
import { KubernetesDriver } from "./driver.ts";

const NS = "agent-sessions";
const name = workloadName("team", "s1");
const secrets = { credentials: { MODEL_API_KEY: "k" }, adapterToken: "token-0123456789abcdef" };
const spec = SessionSpec.parse({
  namespace: "team",
  name: "s1",
  engine: "kubernetes",
  image: `127.0.0.1:5000/agent-sessions/reference@sha256:${"a".repeat(64)}`,
  contract: "v1alpha2",
});

/**
 * A cluster of one session: its objects by kind, a Deployment whose replicas the fake
 * "controllers" follow at once (a Ready pod at 1, a pod being deleted at 0).
 */
type Managed = { manager: string; operation: string };
type FakeObject = {
  metadata: Record<string, unknown> & { managedFields?: Managed[] };
  spec?: Record<string, unknown>;
};

class FakeCluster {
  readonly objects = new Map<string, FakeObject>();
  readonly patches: {
    path: string;
    contentType: string;
    body: unknown;
    fieldManager: string | null;
    force?: string | null;
  }[] = [];
  /** Merge patches that only rewrote `metadata.managedFields`, by object. */
  readonly releases: { path: string; managers: string[] }[] = [];
  pods: { uid: string; deleting: boolean }[] = [];
  /**
   * Server-side apply as the cluster does it: an `up` applying a `spec.replicas` other than the
   * value the runner's own update claims conflicts (HTTP 409; the provider does not force).
   */
  conflicts = false;
  #uid = 0;
  server!: Server;

  /** What the session program's `up` makes (infra/kubernetes/session.ts), at `replicas`. */
  declare(replicas: 0 | 1): void {
    const deployment = this.objects.get(`deployments/${name}`);
    const runnerClaim = deployment?.metadata.managedFields?.some(
      (f) => f.manager === "agent-sessions-runner",
    );
    if (this.conflicts && runnerClaim && deployment?.spec?.replicas !== replicas)
      throw new Error('Apply failed with 1 conflict: conflict with "agent-sessions-runner": .spec.replicas');
    const labels = { [Labels.managedBy]: "agent-sessions" };
    // Applied under the provider's own field manager; earlier managers' claims stay (upsert).
    const set = (key: string, object: FakeObject) => {
      const before = this.objects.get(key)?.metadata.managedFields ?? [];
      const managedFields = [
        ...before.filter((f) => f.manager !== "pulumi-kubernetes-1"),
        { manager: "pulumi-kubernetes-1", operation: "Apply" },
      ];
      this.objects.set(key, { ...object, metadata: { ...object.metadata, managedFields } });
    };
    set(`deployments/${name}`, { metadata: { name, labels }, spec: { replicas } });
    set(`services/${name}`, { metadata: { name }, spec: { clusterIP: "10.0.0.7" } });
    set(`secrets/${name}-credentials`, { metadata: { name: `${name}-credentials` } });
    set(`persistentvolumeclaims/${name}-workspace`, { metadata: { name: `${name}-workspace` } });
    set(`networkpolicies/${name}`, { metadata: { name } });
    this.#follow(replicas);
  }

  /** The session's pod goes (deleted outside) and its ReplicaSet makes a new one. */
  replacePod(): void {
    this.pods = [{ uid: `pod-${++this.#uid}`, deleting: false }];
  }

  #follow(replicas: number): void {
    if (replicas === 0) for (const pod of this.pods) pod.deleting = true;
    else if (!this.pods.some((p) => !p.deleting))
      this.pods.push({ uid: `pod-${++this.#uid}`, deleting: false });
  }

  #pod(p: { uid: string; deleting: boolean }) {
    return {
      metadata: {
        uid: p.uid,
        name: `${name}-${p.uid}`,
        labels: { [Labels.session]: "s1", [Labels.namespace]: "team", [Labels.component]: "session" },
        ...(p.deleting ? { deletionTimestamp: new Date().toISOString() } : {}),
      },
      status: {
        phase: "Running",
        podIP: `10.1.0.${p.uid.slice(4)}`,
        conditions: [{ type: "Ready", status: "True" }],
      },
    };
  }

  async start(): Promise<KubeConfig> {
    this.server = createServer((req, res) => void this.#handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    const kc = new KubeConfig();
    kc.loadFromClusterAndUser(
      {
        name: "fake",
        server: `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`,
        skipTLSVerify: true,
      },
      { name: "u" },
    );
    return kc;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    const url = new URL(req.url ?? "/", "http://fake");
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    const notFound = () => send(404, { kind: "Status", code: 404, reason: "NotFound" });
    if (url.pathname === `/api/v1/namespaces/${NS}`) return send(200, { metadata: { name: NS } });
    if (url.pathname === `/api/v1/namespaces/${NS}/pods`)
      return send(200, { metadata: {}, items: this.pods.map((p) => this.#pod(p)) });
    if (url.pathname === `/api/v1/namespaces/${NS}/endpoints/${name}`) {
      const addresses = this.pods.filter((p) => !p.deleting).map((p) => ({ ip: `10.1.0.${p.uid.slice(4)}` }));
      return send(200, { metadata: { name }, subsets: addresses.length ? [{ addresses }] : [] });
    }
    const m = url.pathname.match(/\/namespaces\/[^/]+\/([a-z]+)\/([^/]+)$/);
    const key = m ? `${m[1]}/${m[2]}` : "";
    const contentType = req.headers["content-type"] ?? "";
    const fieldManager = url.searchParams.get("fieldManager");
    if (req.method === "PATCH" && contentType === "application/apply-patch+yaml") {
      // Server-side apply: made when absent, the manager's claim recorded.
      const body = JSON.parse(text) as FakeObject & { kind: string };
      this.patches.push({ path: key, contentType, body, fieldManager, force: url.searchParams.get("force") });
      const before = this.objects.get(key)?.metadata.managedFields ?? [];
      const spec = m?.[1] === "services" ? { ...body.spec, clusterIP: "10.0.0.7" } : body.spec;
      const managedFields = [...before, { manager: fieldManager ?? "", operation: "Apply" }];
      this.objects.set(key, { metadata: { ...body.metadata, managedFields }, ...(spec ? { spec } : {}) });
      if (m?.[1] === "deployments") this.#follow(Number(body.spec?.replicas));
      return send(200, this.objects.get(key));
    }
    const object = this.objects.get(key);
    if (!object) return notFound();
    if (req.method === "GET") return send(200, object);
    if (req.method === "DELETE") {
      this.objects.delete(key);
      return send(200, { kind: "Status", status: "Success" });
    }
    if (req.method === "PATCH") {
      const body = JSON.parse(text) as {
        spec?: { replicas: number };
        metadata?: { managedFields?: Managed[] };
      };
      if (body.metadata?.managedFields) {
        object.metadata.managedFields = body.metadata.managedFields;
        this.releases.push({ path: key, managers: body.metadata.managedFields.map((f) => f.manager) });
        return send(200, object);
      }
      this.patches.push({ path: key, contentType, body, fieldManager });
      object.spec = { ...object.spec, ...body.spec };
      const claims = (object.metadata.managedFields ?? []).filter((f) => f.manager !== fieldManager);
      object.metadata.managedFields = [...claims, { manager: fieldManager ?? "", operation: "Update" }];
      this.#follow(Number(body.spec?.replicas));
      return send(200, object);
    }
    return send(405, { kind: "Status", code: 405 });
  }
}

/** A stack manager that records its calls; `up`/`scaleDown` apply to the fake cluster when released. */
function fakeStacks(cluster: FakeCluster, violations: { policy: string; message: string }[] = []) {
  const calls: string[] = [];
  const marks: string[] = [];
  let hold: Promise<void> | undefined;
  let fail: Error | undefined;
  const finish = async (op: string, replicas: 0 | 1) => {
    if (hold) await hold;
    if (fail) throw fail;
    cluster.declare(replicas);
    calls.push(`${op} done`);
    return { endpoint: "10.0.0.7:8080", resolvedImageDigest: `sha256:${"a".repeat(64)}`, workloadName: name };
  };
  const stacks = {
    exists: async () => cluster.objects.size > 0,
    refresh: async () => void calls.push("refresh"),
    up: async (s: SessionSpec) => {
      calls.push(`up ${s.replicas}`);
      return finish("up", s.replicas);
    },
    scaleDown: async () => {
      calls.push("scaleDown");
      return finish("scaleDown", 0);
    },
    resume: async () => {
      calls.push("resume");
      return finish("resume", 1);
    },
    destroy: async () => void calls.push("destroy"),
    stackName: (ns: string, n: string) => `${ns}--${n}`,
    judge: async (_spec: SessionSpec, resources: { type: string }[]) => {
      calls.push(`judge ${resources.map((r) => r.type.split(":")[2]).join(",")}`);
      return violations;
    },
    interruptedRecordings: () => [{ namespace: "team", name: "s1" }],
    markRecording: () => {
      marks.push("marked");
      return () => void marks.push("cleared");
    },
  };
  return {
    stacks: stacks as unknown as StackManager,
    calls,
    marks,
    /** The next `up`s wait until the returned function is called. */
    holdUps() {
      let release!: () => void;
      hold = new Promise((r) => {
        release = r;
      });
      return () => {
        hold = undefined;
        release();
      };
    },
    failUps(error: Error | undefined) {
      fail = error;
    },
  };
}

let cluster: FakeCluster;
let kc: KubeConfig;

beforeEach(async () => {
  cluster = new FakeCluster();
  kc = await cluster.start();
});
afterEach(async () => {
  await new Promise((r) => cluster.server.close(r));
});

/** A first create on the full path (an `up`), then the fast paths; the adapter always answers. */
const FULL_CREATE = { namespace: NS, fastCreate: false, probeAdapter: async () => undefined };

async function stopped(driver: KubernetesDriver, fake: ReturnType<typeof fakeStacks>) {
  await driver.provision(name, spec, secrets);
  await driver.scaleDown(name);
  await driver.settled(name);
  fake.calls.length = 0;
  cluster.patches.length = 0;
}

describe("the Kubernetes stop/resume fast path", () => {
  it("stops by scaling the Deployment to 0 at once and records the same `up` at 0 in the background", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets); // a first create: the full path
    expect(fake.calls).toEqual(["up 1", "up done"]);
    const release = fake.holdUps();
    await driver.scaleDown(name);
    // Answered with the Deployment at 0 and its pod being deleted; the recording still runs.
    expect(cluster.patches).toEqual([
      {
        path: `deployments/${name}`,
        contentType: "application/merge-patch+json",
        body: { spec: { replicas: 0 } },
        fieldManager: "agent-sessions-runner",
      },
    ]);
    expect(await driver.isRunning(name)).toBe(false);
    expect(fake.calls).toEqual(["up 1", "up done", "scaleDown"]);
    expect(fake.marks).toEqual(["marked"]);
    release();
    await driver.settled(name);
    expect(fake.calls.at(-1)).toBe("scaleDown done");
    expect(fake.marks).toEqual(["marked", "cleared"]);
  });

  it("resumes with the inputs last recorded by scaling to 1, answers at Ready, then records `up` at 1", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await stopped(driver, fake);
    const release = fake.holdUps();
    const result = await driver.provision(name, spec, secrets);
    expect(result).toEqual({
      containerName: name,
      endpoint: "10.0.0.7:8080",
      resolvedImageDigest: `sha256:${"a".repeat(64)}`,
    });
    expect(cluster.patches.map((p) => p.body)).toEqual([{ spec: { replicas: 1 } }]);
    expect(await driver.isRunning(name)).toBe(true);
    expect(fake.calls).toEqual(["up 1"]); // the recording, not finished yet
    release();
    await driver.settled(name);
    expect(fake.calls).toEqual(["up 1", "up done"]);
  });

  it("acts on the cluster at once for the next operation while the previous one's recording runs", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    const release = fake.holdUps();
    await driver.scaleDown(name);
    // The stop's recording is held: the resume does not wait for it.
    await driver.provision(name, spec, secrets);
    expect(cluster.patches.map((p) => p.body)).toEqual([
      { spec: { replicas: 0 } },
      { spec: { replicas: 1 } },
    ]);
    expect(await driver.isRunning(name)).toBe(true);
    release();
    await driver.settled(name);
  });

  it("stop → resume → stop → resume back to back: each acts at once, the recordings coalesce, and the stack ends recording the last state without undoing it", async () => {
    const fake = fakeStacks(cluster);
    cluster.conflicts = true;
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    fake.calls.length = 0;
    const release = fake.holdUps(); // the first stop's recording runs until released
    await driver.scaleDown(name);
    await driver.provision(name, spec, secrets);
    await driver.scaleDown(name);
    await driver.provision(name, spec, secrets);
    expect(cluster.patches.map((p) => p.body)).toEqual(
      [0, 1, 0, 1].map((replicas) => ({ spec: { replicas } })),
    );
    const live = cluster.pods.filter((p) => !p.deleting).map((p) => p.uid);
    expect(live).toHaveLength(1);
    release();
    await driver.settled(name);
    // One recording ran (the first stop's, now stale: refused, it changes nothing), one was
    // pending and recorded the latest state; the two states in between were never recorded.
    expect(fake.calls.filter((c) => !c.endsWith(" done"))).toEqual(["scaleDown", "up 1"]);
    expect(fake.calls.at(-1)).toBe("up done");
    expect(cluster.objects.get(`deployments/${name}`)?.spec?.replicas).toBe(1);
    // The pod the last resume made still runs: no recording scaled it away and back.
    expect(cluster.pods.filter((p) => !p.deleting).map((p) => p.uid)).toEqual(live);
    expect(fake.marks.filter((m) => m === "cleared")).toHaveLength(
      fake.marks.filter((m) => m === "marked").length,
    );
    // Recorded: the next stop takes the fast path again.
    await driver.scaleDown(name);
    expect(cluster.patches.at(-1)?.body).toEqual({ spec: { replicas: 0 } });
    await driver.settled(name);
    expect(cluster.objects.get(`deployments/${name}`)?.spec?.replicas).toBe(0);
  });

  it("takes the full path when the credentials or the token changed", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await stopped(driver, fake);
    await driver.provision(name, spec, { ...secrets, credentials: { MODEL_API_KEY: "rotated" } });
    expect(cluster.patches).toEqual([]);
    expect(fake.calls).toEqual(["up 1", "up done"]);
  });

  it("takes the full path when an object of the session is gone", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await stopped(driver, fake);
    cluster.objects.delete(`networkpolicies/${name}`);
    await driver.provision(name, spec, secrets);
    expect(cluster.patches).toEqual([]);
    expect(fake.calls).toEqual(["refresh", "up 1", "up done"]);
  });

  it("after a failed recording the next operation takes the full path", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    fake.failUps(new Error("the stack is locked"));
    await driver.scaleDown(name);
    await driver.settled(name);
    fake.failUps(undefined);
    fake.calls.length = 0;
    await driver.provision(name, spec, secrets);
    expect(cluster.patches.map((p) => p.body)).toEqual([{ spec: { replicas: 0 } }]);
    expect(fake.calls).toEqual(["up 1", "up done"]);
  });

  it("with the fast path off, stop and resume are each an `up`", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, { ...FULL_CREATE, fastPath: false });
    await driver.provision(name, spec, secrets);
    await driver.scaleDown(name);
    await driver.provision(name, spec, secrets);
    expect(cluster.patches).toEqual([]);
    expect(fake.calls).toEqual(["up 1", "up done", "scaleDown", "scaleDown done", "up 1", "up done"]);
  });
});

describe("the Kubernetes fast heal", () => {
  it("waits for the Deployment's new Ready pod when the stack records replicas 1: no `up`, no patch", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    fake.calls.length = 0;
    cluster.replacePod();
    const result = await driver.provision(name, spec, secrets);
    expect(result.endpoint).toBe("10.0.0.7:8080");
    expect(fake.calls).toEqual([]);
    expect(cluster.patches).toEqual([]);
    expect(fake.marks).toEqual([]);
  });

  it("takes the full path when the Deployment is gone", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    fake.calls.length = 0;
    cluster.objects.delete(`deployments/${name}`);
    cluster.pods = [];
    await driver.provision(name, spec, secrets);
    expect(fake.calls).toEqual(["refresh", "up 1", "up done"]);
  });
});

describe("the Kubernetes fast create", () => {
  const options = { namespace: NS, fastCreate: true, probeAdapter: async () => undefined };

  it("judges the five objects, applies them server-side at once (the Deployment last), answers Ready, records `up` behind, then releases the runner's claims", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, options);
    const release = fake.holdUps();
    const result = await driver.provision(name, spec, secrets);
    expect(result).toEqual({
      containerName: name,
      endpoint: "10.0.0.7:8080",
      resolvedImageDigest: `sha256:${"a".repeat(64)}`,
    });
    expect(fake.calls).toEqual([
      "judge Secret,PersistentVolumeClaim,Deployment,Service,NetworkPolicy",
      "up 1",
    ]);
    expect(fake.marks).toEqual(["marked"]);
    const applied = cluster.patches.map((p) => [p.path, p.contentType, p.fieldManager, p.force].join(" "));
    const ssa = "application/apply-patch+yaml agent-sessions-runner true";
    expect(applied.slice(0, 4).sort()).toEqual(
      [
        `networkpolicies/${name}`,
        `persistentvolumeclaims/${name}-workspace`,
        `secrets/${name}-credentials`,
        `services/${name}`,
      ].map((path) => `${path} ${ssa}`),
    );
    expect(applied[4]).toBe(`deployments/${name} ${ssa}`);
    expect(cluster.patches.at(-1)?.path).toBe(`deployments/${name}`);
    // The Secret carries the credentials and the adapter token the pod's env names.
    const secret = cluster.patches.find((p) => p.path.startsWith("secrets/"))?.body as { stringData: object };
    expect(secret.stringData).toEqual({ MODEL_API_KEY: "k", ADAPTER_TOKEN: secrets.adapterToken });
    expect(await driver.isRunning(name)).toBe(true);
    release();
    await driver.settled(name);
    expect(fake.marks).toEqual(["marked", "cleared"]);
    for (const object of cluster.objects.values())
      expect(object.metadata.managedFields?.map((f) => f.manager)).toEqual(["pulumi-kubernetes-1"]);
    expect(cluster.releases.map((r) => r.path).sort()).toEqual([...cluster.objects.keys()].sort());
    // Recorded: the next stop takes the fast path.
    await driver.scaleDown(name);
    expect(cluster.patches.at(-1)?.body).toEqual({ spec: { replicas: 0 } });
  });

  it("refuses what the policy pack refuses, as `up` would (PolicyViolationError), with nothing applied and no `up`", async () => {
    const fake = fakeStacks(cluster, [{ policy: "no-control-plane-egress", message: "egress to 4222" }]);
    const driver = new KubernetesDriver(kc, fake.stacks, options);
    const error = await driver.provision(name, spec, secrets).then(
      () => undefined,
      (e: unknown) => e as Error & { code: string },
    );
    expect(error?.name).toBe("PolicyViolationError");
    expect(error?.code).toBe("FAILED_PRECONDITION");
    expect(cluster.patches).toEqual([]);
    expect(cluster.objects.size).toBe(0);
    expect(fake.calls.filter((c) => c.startsWith("up"))).toEqual([]);
    expect(fake.marks).toEqual(["marked", "cleared"]);
  });

  it("is on by default; off, a first create is a full `up`", async () => {
    const fake = fakeStacks(cluster);
    const fast = new KubernetesDriver(kc, fake.stacks, {
      namespace: NS,
      probeAdapter: async () => undefined,
    });
    const release = fake.holdUps();
    await fast.provision(name, spec, secrets);
    expect(fake.calls[0]).toMatch(/^judge /); // judged in process, applied, answered
    expect(fake.calls.slice(1)).toEqual(["up 1"]); // the recording, behind the answer
    release();
    await fast.settled(name);
    // Off: a first create (a new driver, nothing recorded, a fresh cluster) is a full `up`.
    const fresh = fakeStacks(cluster);
    cluster.objects.clear();
    const full = new KubernetesDriver(kc, fresh.stacks, FULL_CREATE);
    await full.provision(name, spec, secrets);
    expect(fresh.calls).toEqual(["up 1", "up done"]);
  });
});

describe("the Kubernetes fast heal during a recording", () => {
  it("does not wait for the recording `up` of a resume in flight (same inputs at replicas 1)", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await stopped(driver, fake);
    const release = fake.holdUps();
    await driver.provision(name, spec, secrets); // fast resume; its recording held
    cluster.replacePod();
    await driver.provision(name, spec, secrets); // the heal answers while the recording still runs
    expect(fake.calls).toEqual(["up 1"]);
    release();
    await driver.settled(name);
    expect(fake.calls).toEqual(["up 1", "up done"]);
  });

  it("after a stop whose recording still runs, a provision is a resume (scaled to 1), not a heal", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    const release = fake.holdUps();
    await driver.scaleDown(name);
    await driver.provision(name, spec, secrets);
    expect(cluster.patches.map((p) => p.body)).toEqual([
      { spec: { replicas: 0 } },
      { spec: { replicas: 1 } },
    ]);
    release();
    await driver.settled(name);
  });
});

describe("remove right after operations back to back", () => {
  it("drops the pending recording, waits for the running one, then destroys", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
    await driver.provision(name, spec, secrets);
    fake.calls.length = 0;
    const release = fake.holdUps();
    await driver.scaleDown(name); // its recording runs, held
    await driver.provision(name, spec, secrets); // pending
    const removing = driver.remove(name);
    await new Promise((r) => setTimeout(r, 50));
    expect(fake.calls).toEqual(["scaleDown"]); // no destroy while the recording runs
    release();
    await removing;
    expect(fake.calls).toEqual(["scaleDown", "scaleDown done", "destroy"]);
    expect(fake.marks.filter((m) => m === "cleared")).toHaveLength(
      fake.marks.filter((m) => m === "marked").length,
    );
  });
});

describe("a runner restarted while a recording ran", () => {
  it("records the state the cluster holds (replicas 0 or 1), record-only, then releases its claims", async () => {
    for (const replicas of [0, 1] as const) {
      const fake = fakeStacks(cluster);
      const before = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
      await before.provision(name, spec, secrets);
      // The previous process acted at once and died before its recordings: the stack says 1.
      fake.failUps(new Error("the runner died"));
      await before.scaleDown(name);
      await before.settled(name);
      if (replicas === 1) {
        // …and then resumed at once (its merge patch), dying before that recording too.
        const deployment = cluster.objects.get(`deployments/${name}`);
        if (deployment) deployment.spec = { ...deployment.spec, replicas: 1 };
        cluster.replacePod();
      }
      fake.failUps(undefined);
      fake.calls.length = 0;
      const restarted = new KubernetesDriver(kc, fake.stacks, FULL_CREATE);
      expect(restarted.interruptedRecordings()).toEqual([name]);
      await restarted.recordEngineState(name);
      expect(fake.calls).toEqual(
        replicas === 0 ? ["scaleDown", "scaleDown done"] : ["resume", "resume done"],
      );
      expect(cluster.objects.get(`deployments/${name}`)?.spec?.replicas).toBe(replicas);
      expect(
        cluster.objects.get(`deployments/${name}`)?.metadata.managedFields?.map((f) => f.manager),
      ).toEqual(["pulumi-kubernetes-1"]);
      cluster.objects.clear();
      cluster.pods = [];
    }
  });
});
