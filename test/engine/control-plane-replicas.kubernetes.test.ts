/**
 * Issue 20, the deployment side: `pulumi up` of infra/control-plane with `serverReplicas: 2` and
 * the secret config `databaseUrl` onto the test bed's real cluster. Two server pods share the test
 * bed's PostgreSQL (reached from the pods through a relay in this process on the address pods
 * reach the host at: the database itself listens on loopback only), one runner pod attaches to
 * one of them through the server's Service. Nothing is faked. The tests share the deployment and
 * run in file order; the last destroys it (afterAll too, when a test failed).
 */
import { randomBytes } from "node:crypto";
import type { V1Pod } from "@kubernetes/client-node";
import type { Stack } from "@pulumi/pulumi/automation/index.js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type ControlPlaneCall,
  type ControlPlaneStack,
  cleanUpControlPlane,
  controlPlaneImage,
  createControlPlaneStack,
  kubectl,
  podsOf,
  prepareCluster,
  putReferenceAgent,
  stepTimer,
} from "../support/control-plane.ts";
import { KUBERNETES_STOPPED_WITHIN_MS } from "../support/engine-probes.ts";
import { isGone, type KubeClients, kubeClients } from "../support/kube-harness.ts";
import { freshDatabase } from "../support/store/store-backends.ts";
import { callApi, until } from "../support/system.ts";
import { startTcpRelay, type TcpRelay } from "../support/tcp-relay.ts";
import {
  applyTestbedEnv,
  builtImage,
  referenceImage,
  sessionHostAddress,
  sessionHostPorts,
} from "../support/testbed.ts";

applyTestbedEnv();

const ID = randomBytes(3).toString("hex");
const NS = `cpr-${ID}`;
const SESSIONS_NS = "agent-sessions";
const AGENT_NS = `cprt-${ID}`;
const STACK = `replicas-${ID}`;
const SERVER_PORT = 8787;
/** The bound stated for the lease to move when its holder's pod is deleted (grace period 0). */
const LEASE_TAKEOVER_MS = 10_000;
const LEASE_TAKEN = "this replica took the controllers' lease";

let database: { url: string; drop(): Promise<void> };
let relay: TcpRelay;
/** The URL the server pods get: the relay's address, the test bed database's credentials. */
let databaseUrl = "";
let password = "";
let k8s: KubeClients;
let controlPlane: ControlPlaneStack | undefined;
let stack: Stack;
let serverUrl = "";
let adminToken = "";
let destroyed = false;
const provisioned = new Set<string>();

const call = (url: string, method: string, path: string, body?: unknown) =>
  callApi(url, adminToken, method, path, body);
const rpc = (url: string, method: string, body: unknown) => call(url, "POST", `/v1/rpc/${method}`, body);
/** A server replica addressed directly (its pod IP), not through the Service. */
const direct = (pod: V1Pod) => `http://${pod.status?.podIP}:${SERVER_PORT}`;

async function podLogs(pod: V1Pod): Promise<string> {
  const r = await kubectl("-n", NS, "logs", pod.metadata?.name ?? "", "--tail=-1");
  return r.stdout + r.stderr;
}

/** The running server pods whose log matches `pattern`. */
async function serversLogging(pattern: RegExp): Promise<V1Pod[]> {
  const pods = await podsOf(k8s, NS, "server");
  const logs = await Promise.all(pods.map(podLogs));
  return pods.filter((_, i) => pattern.test(logs[i] ?? ""));
}

beforeAll(async () => {
  database = await freshDatabase();
  const local = new URL(database.url);
  password = decodeURIComponent(local.password);
  relay = await startTcpRelay(sessionHostAddress("kubernetes"), sessionHostPorts("kubernetes"), {
    host: local.hostname,
    port: Number(local.port),
  });
  const inCluster = new URL(database.url);
  inCluster.hostname = relay.host;
  inCluster.port = String(relay.port);
  databaseUrl = inCluster.toString();

  k8s = await kubeClients();
  await prepareCluster(k8s, SESSIONS_NS);
  const image = await controlPlaneImage();
  controlPlane = await createControlPlaneStack(STACK, {
    image: { value: image },
    namespace: { value: NS },
    sessionsNamespace: { value: SESSIONS_NS },
    createSessionsNamespace: { value: "false" },
    referenceImage: { value: referenceImage().image },
    gitImage: { value: builtImage("base-image").image },
    serverReplicas: { value: "2" },
    databaseUrl: { value: databaseUrl, secret: true },
  });
  stack = controlPlane.stack;
});

afterAll(async () => {
  await cleanUpControlPlane({
    label: "control-plane replicas",
    call: serverUrl && adminToken ? (method, path, body) => call(serverUrl, method, path, body) : undefined,
    provisioned,
    sessionsNamespace: SESSIONS_NS,
    agentNamespace: AGENT_NS,
    controlPlane,
    destroyed,
  });
  await relay?.close();
  await database?.drop();
});

describe("the control plane with two server replicas over PostgreSQL, deployed by `pulumi up`", () => {
  it("pulumi up brings two server pods Ready on one database: no server volume, the URL in a Secret only, one lease holder", async () => {
    const steps = stepTimer("up");
    const up = await stack.up({ onEvent: steps.onEvent });
    steps.report();
    expect(up.summary.result).toBe("succeeded");
    const outputs = await stack.outputs();
    serverUrl = String(outputs.serverUrl?.value);
    adminToken = String(outputs.adminToken?.value);

    const servers = await podsOf(k8s, NS, "server");
    expect(servers).toHaveLength(2);
    for (const pod of servers)
      expect(pod.status?.conditions?.find((c) => c.type === "Ready")?.status, pod.metadata?.name).toBe(
        "True",
      );
    const ready = await fetch(`${serverUrl}/readyz`);
    expect(ready.status).toBe(200);

    // The store is the database: no volume for the server, only the runner's (its Pulumi state).
    const claims = await k8s.core.listNamespacedPersistentVolumeClaim({ namespace: NS });
    expect(claims.items.map((c) => c.metadata?.name)).toEqual(["agent-sessions-runner-data"]);

    // The URL reaches the pods through the Secret alone, and is a secret in the stack's state.
    const secret = await k8s.core.readNamespacedSecret({ namespace: NS, name: "agent-sessions-database" });
    expect(Buffer.from(secret.data?.url ?? "", "base64").toString("utf8")).toBe(databaseUrl);
    const deployment = await k8s.apps.readNamespacedDeployment({
      namespace: NS,
      name: "agent-sessions-server",
    });
    const env = deployment.spec?.template.spec?.containers[0]?.env ?? [];
    expect(env.find((e) => e.name === "AGENT_SESSIONS_DATABASE_URL")).toEqual({
      name: "AGENT_SESSIONS_DATABASE_URL",
      valueFrom: { secretKeyRef: { name: "agent-sessions-database", key: "url" } },
    });
    expect(JSON.stringify(deployment)).not.toContain(password);
    expect(JSON.stringify(await stack.exportStack())).not.toContain(password);

    // Each replica says it keeps its state in PostgreSQL (named without the password).
    for (const pod of servers) {
      const logs = await podLogs(pod);
      expect(logs, pod.metadata?.name).toMatch(/"msg":"server listening".*"store":"postgresql postgres:\/\//);
      expect(logs).not.toContain(password);
    }
    // Exactly one of them runs the controllers.
    await until(
      "a replica to take the controllers' lease",
      async () => (await serversLogging(/took the controllers' lease/)).length > 0,
      30_000,
    );
    expect(await serversLogging(new RegExp(LEASE_TAKEN))).toHaveLength(1);
  });

  it("a session made through the replica without the runner runs on the runner attached to the other; both replicas see it", async () => {
    const withRunner = await until(
      "the runner pod to attach to a replica",
      async () => (await serversLogging(/"msg":"runner attached".*"engine":"kubernetes"/))[0],
      90_000,
    );
    const other = (await podsOf(k8s, NS, "server")).find(
      (p) => p.metadata?.name !== withRunner.metadata?.name,
    );
    expect(other, "the second server replica").toBeDefined();
    const front = direct(other as V1Pod);
    const back = direct(withRunner);

    const viaFront: ControlPlaneCall = (method, path, body) => call(front, method, path, body);
    expect((await putReferenceAgent(viaFront, AGENT_NS)).image).toBe(referenceImage().image);

    const provision = await rpc(front, "ProvisionAgentWorkspace", {
      agent_ref: `${AGENT_NS}/a`,
      client_request_id: "cpr-1",
    });
    expect(provision.status, JSON.stringify(provision.body)).toBe(200);
    const name = provision.body.container_name as string;
    provisioned.add(name);
    const session = await k8s.apps.readNamespacedDeployment({ namespace: SESSIONS_NS, name });
    expect(session.status?.readyReplicas).toBe(1);

    const start = await rpc(front, "StartAgentSession", { container_name: name });
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    expect(start.body.state).toBe("READY");
    const status = await rpc(back, "GetAgentStatus", { session_id: start.body.session_id });
    expect(status.body.sessions[0]).toMatchObject({ container_name: name, state: "READY" });
    const listed = await rpc(back, "GetAgentStatus", {});
    expect(listed.status, JSON.stringify(listed.body)).toBe(200);
    expect(listed.body.sessions.map((s: { container_name: string }) => s.container_name)).toContain(name);

    const stop = await rpc(back, "StopAgentSession", { session_id: start.body.session_id });
    expect(stop.body.state, JSON.stringify(stop.body)).toBe("STOPPED");

    const removed = await rpc(front, "RemoveAgentWorkspace", { container_name: name });
    expect(removed.status, JSON.stringify(removed.body)).toBe(200);
    provisioned.delete(name);
    // Foreground deletion: the Deployment goes once the kubelet has let its pod go.
    await until(
      "the session's Deployment to be gone",
      () => isGone(() => k8s.apps.readNamespacedDeployment({ namespace: SESSIONS_NS, name })),
      KUBERNETES_STOPPED_WITHIN_MS,
    );
  });

  it("deleting the lease holder's pod moves the lease to the other replica, and the Deployment brings a second replica back", async () => {
    const [holder] = await serversLogging(new RegExp(LEASE_TAKEN));
    expect(holder, "the lease holder").toBeDefined();
    const survivor = (await podsOf(k8s, NS, "server")).find(
      (p) => p.metadata?.name !== holder?.metadata?.name,
    );
    expect(survivor, "the other replica").toBeDefined();
    const deletedAt = Date.now();
    await k8s.core.deleteNamespacedPod({
      namespace: NS,
      name: holder?.metadata?.name ?? "",
      gracePeriodSeconds: 0,
    });
    await until(
      "the other replica to take the lease",
      async () => (await podLogs(survivor as V1Pod)).includes(LEASE_TAKEN),
      LEASE_TAKEOVER_MS + 20_000,
    );
    const takeoverMs = Date.now() - deletedAt;
    console.log(`control-plane replicas: lease moved ${takeoverMs} ms after the holder's pod was deleted`);
    expect(takeoverMs).toBeLessThanOrEqual(LEASE_TAKEOVER_MS);

    await until(
      "two Ready server replicas again",
      async () => {
        const d = await k8s.apps.readNamespacedDeployment({ namespace: NS, name: "agent-sessions-server" });
        return d.status?.readyReplicas === 2;
      },
      120_000,
    );
    const listed = await rpc(serverUrl, "GetAgentStatus", {});
    expect(listed.status, JSON.stringify(listed.body)).toBe(200);
    // Still exactly one holder: the newcomer does not take a lease that is held.
    expect(await serversLogging(new RegExp(LEASE_TAKEN))).toHaveLength(1);
  });

  it("pulumi destroy removes the control plane and leaves the database (the platform's) to its owner", async () => {
    const result = await stack.destroy();
    destroyed = true;
    expect(result.summary.result).toBe("succeeded");
    expect(await isGone(() => k8s.core.readNamespace({ name: NS }))).toBe(true);
    // What the replicas wrote is still in the database: the Agent made through one of them.
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      const { rows } = await client.query("SELECT count(*)::int AS n FROM resources WHERE namespace = $1", [
        AGENT_NS,
      ]);
      expect(rows[0]?.n).toBe(2);
    } finally {
      await client.end();
    }
  });
});
