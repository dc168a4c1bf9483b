/**
 * The Kubernetes driver's stop/resume fast path against an in-process fake API server (port 0)
 * and a fake stack manager: which path each operation takes, what it asks the cluster, and that
 * the stack records every change the fast path made, in the background, before the next operation.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Labels, SessionSpec, workloadName } from "../contracts/session-spec.ts";
import type { StackManager } from "../stacks/index.ts";
import { KubernetesDriver } from "./kubernetes.ts";

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
class FakeCluster {
  readonly objects = new Map<string, { metadata: Record<string, unknown>; spec?: Record<string, unknown> }>();
  readonly patches: { path: string; contentType: string; body: unknown; fieldManager: string | null }[] = [];
  pods: { uid: string; deleting: boolean }[] = [];
  #uid = 0;
  server!: Server;

  /** What the session program's `up` makes (infra/kubernetes-session.ts), at `replicas`. */
  declare(replicas: 0 | 1): void {
    const labels = { [Labels.managedBy]: "agent-sessions" };
    this.objects.set(`deployments/${name}`, { metadata: { name, labels }, spec: { replicas } });
    this.objects.set(`services/${name}`, { metadata: { name }, spec: { clusterIP: "10.0.0.7" } });
    this.objects.set(`secrets/${name}-credentials`, { metadata: { name: `${name}-credentials` } });
    this.objects.set(`persistentvolumeclaims/${name}-workspace`, { metadata: { name: `${name}-workspace` } });
    this.objects.set(`networkpolicies/${name}`, { metadata: { name } });
    this.#follow(replicas);
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
    const object = this.objects.get(key);
    if (!object) return notFound();
    if (req.method === "GET") return send(200, object);
    if (req.method === "PATCH") {
      const body = JSON.parse(text) as { spec: { replicas: number } };
      this.patches.push({
        path: key,
        contentType: req.headers["content-type"] ?? "",
        body,
        fieldManager: url.searchParams.get("fieldManager"),
      });
      object.spec = { ...object.spec, ...body.spec };
      this.#follow(body.spec.replicas);
      return send(200, object);
    }
    return send(405, { kind: "Status", code: 405 });
  }
}

/** A stack manager that records its calls; `up`/`scaleDown` apply to the fake cluster when released. */
function fakeStacks(cluster: FakeCluster) {
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
    destroy: async () => void calls.push("destroy"),
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
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS });
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
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS });
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

  it("makes the next operation wait for the pending recording", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS });
    await driver.provision(name, spec, secrets);
    const release = fake.holdUps();
    await driver.scaleDown(name);
    let resumed = false;
    const resuming = driver.provision(name, spec, secrets).then(() => {
      resumed = true;
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(resumed).toBe(false);
    expect(cluster.patches.map((p) => p.body)).toEqual([{ spec: { replicas: 0 } }]);
    release();
    await resuming;
    expect(cluster.patches.map((p) => p.body)).toEqual([
      { spec: { replicas: 0 } },
      { spec: { replicas: 1 } },
    ]);
  });

  it("takes the full path when the credentials or the token changed", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS });
    await stopped(driver, fake);
    await driver.provision(name, spec, { ...secrets, credentials: { MODEL_API_KEY: "rotated" } });
    expect(cluster.patches).toEqual([]);
    expect(fake.calls).toEqual(["up 1", "up done"]);
  });

  it("takes the full path when an object of the session is gone", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS });
    await stopped(driver, fake);
    cluster.objects.delete(`networkpolicies/${name}`);
    await driver.provision(name, spec, secrets);
    expect(cluster.patches).toEqual([]);
    expect(fake.calls).toEqual(["refresh", "up 1", "up done"]);
  });

  it("after a failed recording the next operation takes the full path", async () => {
    const fake = fakeStacks(cluster);
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS });
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
    const driver = new KubernetesDriver(kc, fake.stacks, { namespace: NS, fastPath: false });
    await driver.provision(name, spec, secrets);
    await driver.scaleDown(name);
    await driver.provision(name, spec, secrets);
    expect(cluster.patches).toEqual([]);
    expect(fake.calls).toEqual(["up 1", "up done", "scaleDown", "scaleDown done", "up 1", "up done"]);
  });
});
