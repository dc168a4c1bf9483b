/**
 * Enforcement on the test bed's 1.35 cluster (scripts/testbed.d/KUBERNETES.md), with real
 * sessions the product's Kubernetes driver provisions (stack, policy pack, NetworkPolicy):
 *
 * 1. a session pod reaches neither the server (a listener on the host end of the cluster's link
 *    10.217.0.1, outside the port range the link's host guard admits), nor a runner pod's port,
 *    nor another session's adapter (pod IP and ClusterIP), nor host ports (a listener on every host
 *    address, and the git relay the guard admits);
 * 2. it reaches exactly its Agent's allowed egress endpoint (10.217.0.1 on a port of the guard's
 *    11434-11499), not another port of that range its Agent does not allow, which a pod without
 *    a policy does reach: the NetworkPolicy decides, not only the guard;
 * 3. Pod Security admission refuses a pod that breaks the "restricted" profile in the sessions
 *    namespace the driver made, and admits the same pod without the breach.
 *
 * Every "blocked" has a positive control that can fail: the same probe from the same pod reaches
 * the allowed endpoint, the target answers a pod without a policy (or the host), and our listeners
 * count who connected. It fails at once on a cluster that is not a Ready 1.35 node.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Labels, SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import { isPodReady, KubernetesDriver } from "../../runner/kubernetes/driver.ts";
import { StackManager } from "../../stacks/index.ts";
import {
  applyTestbedEnv,
  kubectlPath,
  kubernetesNode,
  referenceImage,
  sessionHostAddress,
  sessionHostPorts,
} from "../support/testbed.ts";
import { untilSeconds as until } from "../support/until.ts";

applyTestbedEnv();
const run = promisify(execFile);

const suffix = randomBytes(3).toString("hex");
const k8sNamespace = `engine-k135enf-${suffix}`;
const sessionNamespace = "engine";
const dataDir = mkdtempSync(join(tmpdir(), "k135-enforcement-"));
/** A session whose Agent allows one endpoint, and one whose Agent allows none. */
const sessionA = `enf-a-${suffix}`;
const sessionB = `enf-b-${suffix}`;
const runnerPodName = "runner-stand-in";
/** The host guard's chain (scripts/testbed.d/kubernetes.sh): its LOG rule counts what it refused. */
const linkGuardChain = "AGENT-SESSIONS-K135-INPUT";
const GIT_RELAY_PORT = 8418;
const PROBE_TIMEOUT_MS = 3000;

const kc = new KubeConfig();
let core: CoreV1Api;
let stacks: StackManager;
let driver: KubernetesDriver;
let host = "";
const timings: Record<string, number> = {};

/** A host listener that records the address of every connection it accepted. */
type Listener = { name: string; port: number; from: string[]; server: Server };
const listeners: Listener[] = [];

async function listen(name: string, address: string, ports: number[]): Promise<Listener> {
  for (const port of ports) {
    const from: string[] = [];
    const server = createServer((socket) => {
      from.push(socket.remoteAddress?.replace(/^::ffff:/, "") ?? "?");
      // A probe closes at once: the reset it may get is no error of the listener's.
      socket.on("error", () => undefined);
      socket.end("hi\n");
    });
    const ok = await new Promise<boolean>((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(port, address, () => resolve(true));
    });
    if (!ok) continue;
    const bound = server.address();
    const l = { name, port: typeof bound === "object" && bound ? bound.port : port, from, server };
    listeners.push(l);
    return l;
  }
  throw new Error(`no free port for ${name} on ${address} among ${ports.join(",")}`);
}

/** The host itself connects: the listener is up (a "blocked" to it is not a dead listener). */
function hostReaches(address: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: address, port, timeout: PROBE_TIMEOUT_MS });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.once("connect", () => done(true));
    s.once("error", () => done(false));
    s.once("timeout", () => done(false));
  });
}

/**
 * TCP connect from inside a pod with the image's own node (its busybox wget dies of SIGSEGV on
 * 1.35). Prints `connected`, `timeout` or `error <code>`; anything else is a broken probe.
 */
const PROBE = `const net = require("node:net");
const [host, port, ms] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port) });
const done = (r) => { console.log(r); s.destroy(); process.exit(0); };
s.setTimeout(Number(ms), () => done("timeout"));
s.on("connect", () => done("connected"));
s.on("error", (e) => done("error " + e.code));`;

type Outcome = "reach" | "refused" | "unreachable" | "timeout";

async function probe(pod: string, address: string, port: number): Promise<Outcome> {
  const { stdout } = await run(
    kubectlPath(),
    [
      "-n",
      k8sNamespace,
      "exec",
      pod,
      "-c",
      "adapter",
      "--",
      "/bin/node",
      "-e",
      PROBE,
      address,
      `${port}`,
      `${PROBE_TIMEOUT_MS}`,
    ],
    { timeout: 30_000, env: process.env },
  );
  const line = stdout.trim();
  if (line === "connected") return "reach";
  if (line === "timeout") return "timeout";
  if (line === "error ECONNREFUSED") return "refused"; // kube-router REJECTs with a reset
  if (line === "error EHOSTUNREACH" || line === "error ENETUNREACH") return "unreachable"; // the host guard
  throw new Error(`probe ${pod} -> ${address}:${port} gave neither a connection nor a refusal: ${stdout}`);
}

/** Blocked: the connection failed as a firewall fails it, and a listener of ours never saw the pod. */
async function expectBlocked(pod: string, podIp: string, address: string, port: number, l?: Listener) {
  const seen = l?.from.length ?? 0;
  const outcome = await probe(pod, address, port);
  console.info(`  ${pod} -> ${address}:${port}: ${outcome}`);
  expect(["refused", "unreachable", "timeout"]).toContain(outcome);
  if (l) expect(l.from.slice(seen)).not.toContain(podIp);
  return outcome;
}

async function expectReach(pod: string, podIp: string, address: string, port: number, l?: Listener) {
  const seen = l?.from.length ?? 0;
  const outcome = await probe(pod, address, port);
  console.info(`  ${pod} -> ${address}:${port}: ${outcome}`);
  expect(outcome).toBe("reach");
  // Pods are not masqueraded on their way to the link: the listener sees the pod itself.
  if (l) expect(l.from.slice(seen)).toContain(podIp);
}

function guardRefused(): Promise<number> {
  return run("iptables", ["-w", "10", "-nvxL", linkGuardChain], { encoding: "utf8" }).then(({ stdout }) => {
    const line = stdout.split("\n").find((l) => l.trim().split(/\s+/)[2] === "LOG");
    if (!line) throw new Error(`no LOG rule in ${linkGuardChain}:\n${stdout}`);
    return Number(line.trim().split(/\s+/)[0]);
  });
}

type Session = { name: string; pod: string; ip: string; clusterIp: string };
const sessions: Record<"a" | "b", Session> = {
  a: { name: sessionA, pod: "", ip: "", clusterIp: "" },
  b: { name: sessionB, pod: "", ip: "", clusterIp: "" },
};
let allowed: Listener;
let otherAdmitted: Listener;
let server: Listener;
let hostPort: Listener;
let runnerIp = "";

async function provision(s: Session, egress: { cidr: string; port: number }[]): Promise<void> {
  const containerName = workloadName(sessionNamespace, s.name);
  const t0 = Date.now();
  const result = await driver.provision(
    containerName,
    SessionSpec.parse({
      namespace: sessionNamespace,
      name: s.name,
      engine: "kubernetes",
      image: referenceImage().image,
      contract: "v1alpha2",
      resources: { cpu: "250m", memoryMiB: 256, storageMiB: 64 },
      egress,
      kubernetes: { namespace: k8sNamespace },
    }),
    { credentials: {}, adapterToken: `adapter-${suffix}` },
  );
  timings[`provision ${s.name}`] = Date.now() - t0;
  const selector = `${Labels.session}=${s.name},${Labels.namespace}=${sessionNamespace}`;
  const pods = (await core.listNamespacedPod({ namespace: k8sNamespace, labelSelector: selector })).items;
  const pod = pods.find(isPodReady);
  if (!pod?.metadata?.name || !pod.status?.podIP) throw new Error(`no Ready pod for ${s.name}`);
  s.pod = pod.metadata.name;
  s.ip = pod.status.podIP;
  s.clusterIp = result.endpoint.split(":")[0] ?? "";
}

/** A pod shaped like a session pod (Pod Security "restricted"), `over` applied to it. */
function restrictedPod(
  name: string,
  labels: Record<string, string>,
  over: (p: V1Pod) => void = () => {},
): V1Pod {
  const pod: V1Pod = {
    metadata: { name, labels },
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 1,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 65532,
        runAsGroup: 65532,
        seccompProfile: { type: "RuntimeDefault" },
      },
      containers: [
        {
          name: "adapter",
          image: referenceImage().image,
          imagePullPolicy: "IfNotPresent",
          ports: [{ containerPort: 8080, protocol: "TCP" }],
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ["ALL"] },
          },
          readinessProbe: { httpGet: { path: "/readyz", port: 8080 }, periodSeconds: 1 },
          volumeMounts: [{ name: "tmp", mountPath: "/tmp" }],
        },
      ],
      volumes: [{ name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "64Mi" } }],
    },
  };
  over(pod);
  return pod;
}

beforeAll(async () => {
  // Loud, never a skip: the cluster must be the test bed's 1.35 one (NetworkPolicy enforced).
  kc.loadFromDefault();
  core = kc.makeApiClient(CoreV1Api);
  const node = await core.readNode({ name: kubernetesNode() });
  const version = node.status?.nodeInfo?.kubeletVersion ?? "";
  if (
    !version.startsWith("v1.35.") ||
    !node.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")
  )
    throw new Error(`node ${kubernetesNode()} is ${version}, Ready: no; wanted a Ready v1.35 node`);
  host = sessionHostAddress("kubernetes");

  // The Agent's endpoint and a second port the guard admits too; the server on its own port
  // (8787, the serve default) if free there, else any port outside the guard's range.
  const range = sessionHostPorts("kubernetes");
  allowed = await listen("allowed endpoint", host, range);
  otherAdmitted = await listen(
    "admitted, not allowed",
    host,
    range.filter((p) => p !== allowed.port),
  );
  server = await listen("server", host, [8787, 0]);
  hostPort = await listen("host port (every address)", "0.0.0.0", [0]);
  for (const l of [server, hostPort]) expect(range).not.toContain(l.port);

  stacks = await StackManager.create(
    { dataDir: join(dataDir, "runner"), env: { KUBECONFIG: process.env.KUBECONFIG ?? "" } },
    { log: (level, msg, fields) => level !== "info" && console.error(level, msg, fields) },
  );
  // The namespace as a driver before Pod Security labels made it (managed by us, no enforce
  // label): the driver labels it on its first provision (runner/kubernetes/driver.ts), so the
  // admission checks below prove that path. A namespace it creates itself is labelled at once.
  await core.createNamespace({
    body: { metadata: { name: k8sNamespace, labels: { [Labels.managedBy]: "agent-sessions" } } },
  });
  // The runner here is this process on the host: the pods see it at the link's host end.
  driver = new KubernetesDriver(kc, stacks, { namespace: k8sNamespace, runnerCidr: `${host}/32` });
  await provision(sessions.a, [{ cidr: host, port: allowed.port }]);
  await provision(sessions.b, []);

  // A pod with the runner's labels (what the sessions' ingress admits) and no policy of its own:
  // the comparison pod for every "blocked" below.
  const t0 = Date.now();
  await core.createNamespacedPod({
    namespace: k8sNamespace,
    body: restrictedPod(runnerPodName, { [Labels.component]: "runner" }),
  });
  const runner = await until("the runner stand-in Ready", 120, async () => {
    const p = await core.readNamespacedPod({ name: runnerPodName, namespace: k8sNamespace });
    return isPodReady(p) ? p : undefined;
  });
  timings.runnerStandInReady = Date.now() - t0;
  runnerIp = runner.status?.podIP ?? "";
});

afterAll(async () => {
  for (const l of listeners) l.server.close();
  if (stacks)
    for (const s of [sessionA, sessionB])
      if (await stacks.exists(sessionNamespace, s).catch(() => false))
        await stacks
          .destroy(sessionNamespace, s)
          .catch((e: unknown) => console.error("cleanup destroy failed", e));
  await core?.deleteNamespace({ name: k8sNamespace }).catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
  console.log(`k135 enforcement timings (ms): ${JSON.stringify(timings)}`);
});

describe("NetworkPolicy and Pod Security enforced on sessions (Kubernetes 1.35)", () => {
  it("positive controls: the listeners answer the host, the session and runner pods serve, the probe connects", async () => {
    for (const l of listeners)
      expect(await hostReaches(host, l.port), `${l.name} on ${host}:${l.port}`).toBe(true);
    // The host's runner is admitted by runnerCidr: both adapters answer on pod IP and ClusterIP.
    for (const s of Object.values(sessions))
      for (const address of [s.ip, s.clusterIp])
        expect(await hostReaches(address, 8080), `host -> ${s.name} ${address}:8080`).toBe(true);
    // A pod without a policy of its own: the same probe reaches both sessions (their ingress admits
    // the runner's labels), the guard's admitted ports, and the git relay.
    for (const s of Object.values(sessions)) {
      await expectReach(runnerPodName, runnerIp, s.ip, 8080);
      await expectReach(runnerPodName, runnerIp, s.clusterIp, 8080);
    }
    await expectReach(runnerPodName, runnerIp, host, allowed.port, allowed);
    await expectReach(runnerPodName, runnerIp, host, otherAdmitted.port, otherAdmitted);
    await expectReach(runnerPodName, runnerIp, host, GIT_RELAY_PORT);
  });

  it("the session reaches exactly its Agent's endpoint: not another port the guard admits, and the session whose Agent allows nothing does not reach it", async () => {
    const a = sessions.a;
    const t0 = Date.now();
    await expectReach(a.pod, a.ip, host, allowed.port, allowed);
    timings.probeReach = Date.now() - t0;
    // Same host, a port the guard lets through (the runner stand-in reached it above): the
    // session's NetworkPolicy refuses it.
    const guardBefore = await guardRefused();
    expect(await expectBlocked(a.pod, a.ip, host, otherAdmitted.port, otherAdmitted)).toBe("refused");
    expect(await expectBlocked(a.pod, a.ip, host, GIT_RELAY_PORT)).toBe("refused");
    expect(await guardRefused()).toBe(guardBefore); // refused before the guard: by the policy
    // Per session: B's Agent allows nothing, so A's endpoint is closed to B.
    await expectBlocked(sessions.b.pod, sessions.b.ip, host, allowed.port, allowed);
    // And A still reaches it after all that (the policy did not just close everything meanwhile).
    await expectReach(a.pod, a.ip, host, allowed.port, allowed);
  });

  it("the session reaches neither the server, nor a host port, nor the runner's port, nor another session's adapter", async () => {
    const a = sessions.a;
    const t0 = Date.now();
    await expectBlocked(a.pod, a.ip, host, server.port, server);
    timings.probeBlocked = Date.now() - t0;
    await expectBlocked(a.pod, a.ip, host, hostPort.port, hostPort);
    await expectBlocked(a.pod, a.ip, runnerIp, 8080);
    await expectBlocked(a.pod, a.ip, sessions.b.ip, 8080);
    await expectBlocked(a.pod, a.ip, sessions.b.clusterIp, 8080);
    // The other way round too: B reaches neither A's adapter nor the server.
    await expectBlocked(sessions.b.pod, sessions.b.ip, a.ip, 8080);
    await expectBlocked(sessions.b.pod, sessions.b.ip, a.clusterIp, 8080);
    await expectBlocked(sessions.b.pod, sessions.b.ip, host, server.port, server);
    // Without a session policy the server's port is still closed, by the host guard (unreachable):
    // the policy is not the only wall, but the one tested above.
    expect(await expectBlocked(runnerPodName, runnerIp, host, server.port, server)).toBe("unreachable");
    // The probe still connects from A: every "blocked" above was the network saying no.
    await expectReach(a.pod, a.ip, host, allowed.port, allowed);
  });

  it("Pod Security 'restricted' in the sessions namespace (made by an older driver, labelled by this one): a privileged, a hostPath and a root pod are refused, the same pod without the breach is admitted", async () => {
    const ns = await core.readNamespace({ name: k8sNamespace });
    expect(ns.metadata?.labels?.["pod-security.kubernetes.io/enforce"]).toBe("restricted");
    const labels = { "k135-enforcement": "admission" };
    const cases: { name: string; over: (p: V1Pod) => void; message: RegExp }[] = [
      {
        name: "privileged",
        over: (p) => {
          const c = p.spec?.containers[0];
          // Without allowPrivilegeEscalation: false, which validation refuses beside privileged.
          if (c?.securityContext)
            c.securityContext = {
              ...c.securityContext,
              allowPrivilegeEscalation: undefined,
              privileged: true,
            };
        },
        message: /privileged \(container "adapter" must not set securityContext\.privileged=true\)/,
      },
      {
        name: "host-path",
        over: (p) => {
          p.spec?.volumes?.push({ name: "host", hostPath: { path: "/etc" } });
          p.spec?.containers[0]?.volumeMounts?.push({ name: "host", mountPath: "/host", readOnly: true });
        },
        message: /restricted volume types \(volume "host" uses restricted volume type "hostPath"\)/,
      },
      {
        name: "root",
        over: (p) => {
          // runAsNonRoot stays true: the one breach is the uid (the kubelet would refuse it later,
          // admission refuses it first).
          if (p.spec?.securityContext) p.spec.securityContext = { ...p.spec.securityContext, runAsUser: 0 };
        },
        message: /runAsUser=0 \(pod must not set runAsUser=0\)/,
      },
    ];
    // Control: the pod as built is admitted here (dry run: admission runs, nothing is stored).
    const admitted = await core.createNamespacedPod({
      namespace: k8sNamespace,
      body: restrictedPod("admission-control", labels),
      dryRun: "All",
    });
    expect(admitted.metadata?.name).toBe("admission-control");
    for (const c of cases) {
      let refusal: { code?: number; body?: unknown } | undefined;
      try {
        await core.createNamespacedPod({
          namespace: k8sNamespace,
          body: restrictedPod(`bad-${c.name}`, labels, c.over),
        });
      } catch (e) {
        refusal = e as { code?: number; body?: unknown };
      }
      expect(refusal, `${c.name} pod admitted`).toBeDefined();
      const message = String((JSON.parse(String(refusal?.body)) as { message?: string }).message);
      console.info(`  ${c.name}: ${refusal?.code} ${message}`);
      expect(refusal?.code).toBe(403);
      expect(message).toContain(
        `pods "bad-${c.name}" is forbidden: violates PodSecurity "restricted:latest"`,
      );
      expect(message).toMatch(c.message);
    }
    const left = await core.listNamespacedPod({
      namespace: k8sNamespace,
      labelSelector: "k135-enforcement=admission",
    });
    expect(left.items).toEqual([]);
  });
});
