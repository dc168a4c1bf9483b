/**
 * What the control-plane engine tests share: `pulumi up` of infra/control-plane onto the test
 * bed's cluster through the Automation API (a file:// backend in a temp dir), the control-plane
 * image, and the test bed's kubectl.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { PatchStrategy, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import {
  type ConfigMap,
  type EngineEvent,
  LocalWorkspace,
  PulumiCommand,
  type Stack,
} from "@pulumi/pulumi/automation/index.js";
import { API_VERSION } from "../../contracts/resources.ts";
import { Labels, SESSIONS_NAMESPACE_POD_SECURITY } from "../../contracts/session-spec.ts";
import { ensureNamespace, type KubeClients } from "./kube-harness.ts";
import type { ApiReply } from "./system.ts";
import { kubectlPath, repoRoot, testbedHome } from "./testbed.ts";

export const controlPlaneProgram = join(repoRoot, "infra", "control-plane");

export type Run = { code: number; stdout: string; stderr: string };

/** The test bed's kubectl (never the machine image's); resolves with the exit code, never rejects. */
export function kubectl(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(kubectlPath(), args, { encoding: "utf8", timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** Builds (or finds cached) the control-plane image under the test bed's lock; its digest-pinned ref. */
export function controlPlaneImage(): Promise<string> {
  const script = [
    "set -euo pipefail",
    "d=scripts/testbed.d",
    "source $d/common.sh; source $d/node.sh; source $d/docker.sh; source $d/pulumi.sh; source $d/control-plane-image.sh",
    'exec 9>"$TB_HOME/.lock"; flock 9',
    "tb_control_plane_image_up",
  ].join("\n");
  return new Promise((resolve, reject) => {
    execFile("bash", ["-c", script], { cwd: repoRoot, encoding: "utf8" }, (error, _out, stderr) => {
      if (error) return reject(new Error(`control-plane image: ${stderr.slice(-2000)}`));
      const state = JSON.parse(
        readFileSync(join(testbedHome, "state", "control-plane-image.json"), "utf8"),
      ) as { image: string };
      resolve(state.image);
    });
  });
}

/** Per-resource durations of one engine operation, from its own event stream (slowest first). */
export function stepTimer(into: string) {
  const began = new Map<string, number>();
  const steps: [string, number][] = [];
  return {
    onEvent(e: EngineEvent) {
      const pre = e.resourcePreEvent?.metadata;
      const out = e.resOutputsEvent?.metadata;
      if (pre) began.set(pre.urn, Date.now());
      if (out && began.has(out.urn))
        steps.push([`${out.op} ${out.urn.split("::").pop()}`, Date.now() - (began.get(out.urn) ?? 0)]);
    },
    report() {
      steps.sort((a, b) => b[1] - a[1]);
      console.log(
        `${into}: slowest steps ${steps
          .slice(0, 5)
          .map(([s, ms]) => `${s} ${ms} ms`)
          .join(", ")}`,
      );
    },
  };
}

/** A stack of infra/control-plane in a backend of its own; `remove` forgets it (after a destroy). */
export type ControlPlaneStack = { stack: Stack; remove(): Promise<void> };

/**
 * A new stack of the control-plane program with `config` (keys without the project prefix),
 * on a file:// backend in a temp dir with a random passphrase.
 */
export async function createControlPlaneStack(
  stackName: string,
  config: ConfigMap,
): Promise<ControlPlaneStack> {
  const pulumiHome = process.env.PULUMI_HOME;
  if (!pulumiHome) throw new Error("PULUMI_HOME unset: run scripts/testbed up pulumi");
  const workDir = mkdtempSync(join(tmpdir(), "cp-test-"));
  const pulumiCommand = await PulumiCommand.get({ root: pulumiHome, skipVersionCheck: true });
  const stack = await LocalWorkspace.createStack(
    { stackName, workDir: controlPlaneProgram },
    {
      pulumiCommand,
      pulumiHome,
      secretsProvider: "passphrase",
      envVars: {
        PULUMI_BACKEND_URL: `file://${workDir}`,
        PULUMI_CONFIG_PASSPHRASE: randomBytes(16).toString("hex"),
        PULUMI_SKIP_UPDATE_CHECK: "1",
        PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK: "1",
        KUBECONFIG: process.env.KUBECONFIG ?? "",
        PATH: [`${pulumiHome}/bin`, dirname(process.execPath), process.env.PATH ?? ""].join(":"),
      },
    },
  );
  await stack.setAllConfig(
    Object.fromEntries(
      Object.entries(config).map(([key, value]) => [`agent-sessions-control-plane:${key}`, value]),
    ),
  );
  return {
    stack,
    async remove() {
      await stack.workspace.removeStack(stackName).catch(() => undefined);
      const settings = join(controlPlaneProgram, `Pulumi.${stackName}.yaml`);
      if (existsSync(settings)) rmSync(settings);
      rmSync(workDir, { recursive: true, force: true });
    },
  };
}

/** The control plane's pods of one component (server, runner) that are not being deleted. */
export async function podsOf(k8s: KubeClients, namespace: string, component: string): Promise<V1Pod[]> {
  const pods = await k8s.core.listNamespacedPod({
    namespace,
    labelSelector: `${Labels.component}=${component}`,
  });
  return pods.items.filter((p) => !p.metadata?.deletionTimestamp);
}

/** One pod of a component (the first not being deleted); throws when there is none. */
export async function podOf(k8s: KubeClients, namespace: string, component: string): Promise<V1Pod> {
  const [pod] = await podsOf(k8s, namespace, component);
  if (!pod) throw new Error(`no ${component} pod in ${namespace}`);
  return pod;
}

/**
 * Checks that pods can reach the API server, and makes the platform's sessions namespace
 * (createSessionsNamespace=false) as the control plane labels one it creates. Returns the first
 * three octets of the cluster's Service CIDR (a /24 on either test-bed cluster).
 */
export async function prepareCluster(k8s: KubeClients, sessionsNamespace: string): Promise<string> {
  // A runner pod reaches the API server through the `kubernetes` Service; on the test bed the
  // API server listens on loopback, and the cluster's script relays the bridge address to it
  // (scripts/testbed.d/kubernetes.sh: 10.216.0.1:16443 in its network namespace).
  const endpoints = await k8s.core.readNamespacedEndpoints({ namespace: "default", name: "kubernetes" });
  const apiAddresses = (endpoints.subsets ?? []).flatMap((s) => s.addresses ?? []);
  if (apiAddresses.length === 0)
    throw new Error(
      "default/kubernetes has no endpoints: pods cannot reach the API server on this test bed " +
        "(the test bed's cluster script must relay <bridge IP>:<API port> to the API server and publish that endpoint)",
    );
  const apiService = await k8s.core.readNamespacedService({ namespace: "default", name: "kubernetes" });
  await ensureNamespace(k8s.core, sessionsNamespace);
  // Pod Security admits only `restricted` pods there. The runner may not patch namespaces, so it
  // cannot do this itself.
  await k8s.core.patchNamespace(
    { name: sessionsNamespace, body: { metadata: { labels: SESSIONS_NAMESPACE_POD_SECURITY } } },
    setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
  );
  return (apiService.spec?.clusterIP ?? "").split(".").slice(0, 3).join(".");
}

/** One API call against the deployed server (test/support/system.ts `callApi` bound to a URL and token). */
export type ControlPlaneCall = (method: string, path: string, body?: unknown) => Promise<ApiReply>;

/**
 * Puts AgentRuntime `reference` (with the spec the server already has in `default`) and Agent `a`
 * bound to it into `namespace`; throws with the server's answer when either is refused. Returns
 * that spec.
 */
export async function putReferenceAgent(
  call: ControlPlaneCall,
  namespace: string,
): Promise<{ image?: string }> {
  const reference = await call("GET", "/v1/namespaces/default/agentruntimes/reference");
  const spec = (reference.body as { spec?: { image?: string } } | undefined)?.spec;
  if (reference.status !== 200 || !spec)
    throw new Error(`AgentRuntime default/reference: ${reference.status} ${JSON.stringify(reference.body)}`);
  for (const [kind, name, body] of [
    ["agentruntimes", "reference", { kind: "AgentRuntime", spec }],
    ["agents", "a", { kind: "Agent", spec: { runtimeRef: "reference" } }],
  ] as const) {
    const put = await call("PUT", `/v1/namespaces/${namespace}/${kind}/${name}`, {
      apiVersion: API_VERSION,
      metadata: { name, namespace },
      ...body,
    });
    if (put.status >= 300) throw new Error(`PUT ${kind}/${name}: ${put.status} ${JSON.stringify(put.body)}`);
  }
  return spec;
}

/**
 * A control-plane test's afterAll: removes the sessions it provisioned through the API (when it got
 * that far), deletes whatever of the Agent namespace's session objects a failed test left, destroys
 * the stack unless the test did, forgets it, and says aloud what it had to force.
 */
export async function cleanUpControlPlane(run: {
  label: string;
  /** Absent when the test never reached the API. */
  call: ControlPlaneCall | undefined;
  provisioned: Iterable<string>;
  sessionsNamespace: string;
  agentNamespace: string;
  controlPlane: ControlPlaneStack | undefined;
  destroyed: boolean;
}): Promise<void> {
  const forced: string[] = [];
  if (run.call) {
    for (const name of run.provisioned) {
      const r = await run
        .call("POST", "/v1/rpc/RemoveAgentWorkspace", { container_name: name })
        .catch(() => undefined);
      if (r?.status !== 200) forced.push(name);
    }
  }
  // Their stacks died with the runner's volume: delete the objects by label.
  for (const kind of ["deployment", "service", "persistentvolumeclaim", "networkpolicy", "secret"]) {
    const selector = `${Labels.namespace}=${run.agentNamespace}`;
    await kubectl("-n", run.sessionsNamespace, "delete", kind, "-l", selector, "--wait=false");
  }
  if (run.controlPlane && !run.destroyed) {
    forced.push("its stack");
    await run.controlPlane.stack
      .destroy()
      .catch((e: unknown) => console.warn(`${run.label}: destroy failed: ${String(e)}`));
  }
  await run.controlPlane?.remove();
  if (forced.length) console.warn(`${run.label}: forced cleanup of ${forced.join(", ")}`);
}
