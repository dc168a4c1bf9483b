/**
 * Issue 6, the control plane: `pulumi up` of infra/control-plane (Automation API, a file://
 * backend in a temp dir) onto the test bed's real cluster, with the control-plane image built
 * FROM scratch (scripts/testbed.d/control-plane-image.sh). The server and the runner run as pods;
 * the runner reaches the API server with its own service account and drives session stacks from
 * inside the cluster. Nothing is faked. The tests share one deployment and run in file order; the
 * last one destroys it (afterAll destroys it too when a test failed).
 *
 * Sessions land in namespace `agent-sessions`: the runner's Kubernetes driver keeps them there
 * (runner/kubernetes/driver.ts), so the stack uses it without creating or deleting it
 * (createSessionsNamespace=false); the control plane's own namespace is unique per run.
 *
 * On the test bed's 1.35 cluster (scripts/testbed.d/KUBERNETES.md) NetworkPolicy is enforced and Pod
 * Security admits only `restricted` pods in the sessions namespace.
 */
import { randomBytes } from "node:crypto";
import { KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import type { Stack } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Labels, SESSIONS_NAMESPACE_POD_SECURITY } from "../../contracts/session-spec.ts";
import {
  type ControlPlaneStack,
  cleanUpControlPlane,
  controlPlaneImage,
  createControlPlaneStack,
  kubectl,
  podOf as podOfIn,
  prepareCluster,
  putReferenceAgent,
  stepTimer,
} from "../support/control-plane.ts";
import { KUBERNETES_STOPPED_WITHIN_MS } from "../support/engine-probes.ts";
import { isGone, type KubeClients, kubeClients } from "../support/kube-harness.ts";
import { callApi, until } from "../support/system.ts";
import { applyTestbedEnv, builtImage, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const ID = randomBytes(3).toString("hex");
/** The control plane's namespace (created and deleted by the stack). */
const NS = `cp-${ID}`;
const SESSIONS_NS = "agent-sessions";
/** The agent-sessions namespace (server-side resources) of this run's Agent. */
const AGENT_NS = `cpt-${ID}`;
const STACK = `test-${ID}`;
const RUNNER_SA = `system:serviceaccount:${NS}:agent-sessions-runner`;

const timings: Record<string, number> = {};
async function timed<T>(what: string, fn: () => Promise<T>): Promise<T> {
  const began = Date.now();
  try {
    return await fn();
  } finally {
    timings[what] = Date.now() - began;
  }
}

let k8s: KubeClients;
let controlPlane: ControlPlaneStack | undefined;
let stack: Stack;
let serverUrl = "";
/** The first three octets of the cluster's Service CIDR (a /24 on either test-bed cluster). */
let servicePrefix = "";
let adminToken = "";
let destroyed = false;
const provisioned = new Set<string>();

const call = (method: string, path: string, body?: unknown, token = adminToken) =>
  callApi(serverUrl, token, method, path, body);
const rpc = (method: string, body: unknown, token?: string) => call("POST", `/v1/rpc/${method}`, body, token);

async function logsOf(deployment: string): Promise<string> {
  const r = await kubectl("-n", NS, "logs", `deploy/${deployment}`, "--tail=200");
  return r.stdout + r.stderr;
}

const podOf = (component: string) => podOfIn(k8s, NS, component);

beforeAll(async () => {
  k8s = await kubeClients();
  servicePrefix = await prepareCluster(k8s, SESSIONS_NS);
  const image = await timed("image", controlPlaneImage);

  controlPlane = await createControlPlaneStack(STACK, {
    image: { value: image },
    namespace: { value: NS },
    sessionsNamespace: { value: SESSIONS_NS },
    createSessionsNamespace: { value: "false" },
    referenceImage: { value: referenceImage().image },
    // The session pods' workspace sidecar: the files API from an in-cluster runner.
    gitImage: { value: builtImage("base-image").image },
  });
  stack = controlPlane.stack;
});

afterAll(async () => {
  await cleanUpControlPlane({
    label: "control-plane",
    call: serverUrl && adminToken ? call : undefined,
    provisioned,
    sessionsNamespace: SESSIONS_NS,
    agentNamespace: AGENT_NS,
    controlPlane,
    destroyed,
  });
  console.log(`control-plane timings (ms): ${JSON.stringify(timings)}`);
});

describe("the control plane deployed by `pulumi up` onto the test bed's cluster", () => {
  it("pulumi up brings the server pod to Ready, and its /readyz answers through its ClusterIP from the host", async () => {
    const steps = stepTimer("up");
    const up = await timed("up", () => stack.up({ onEvent: steps.onEvent }));
    steps.report();
    expect(up.summary.result).toBe("succeeded");
    const outputs = await stack.outputs();
    serverUrl = String(outputs.serverUrl?.value);
    adminToken = String(outputs.adminToken?.value);
    expect(outputs.adminToken?.secret).toBe(true);
    expect(outputs.namespace?.value).toBe(NS);
    // A ClusterIP of the cluster's Service CIDR (10.215.0.0/24 on the test bed).
    expect(serverUrl).toMatch(new RegExp(`^http://${servicePrefix.replaceAll(".", "\\.")}\\.\\d+:8787$`));

    const server = await podOf("server");
    expect(server.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
    const ready = await fetch(`${serverUrl}/readyz`);
    expect(ready.status).toBe(200);
    // Ready whether or not the runner pod has dialled yet (proxy/http/readiness.ts says why).
    expect(await ready.json()).toMatchObject({ status: expect.stringMatching(/^(ready|no_runner)$/) });
  });

  it("the runner pod starts, reaches the API server with its own service account and attaches to the server", async () => {
    const runner = await podOf("runner");
    expect(runner.status?.phase).toBe("Running");
    await timed("runner attached", () =>
      until(
        "the server to log `runner attached` for the runner pod",
        async () =>
          /"msg":"runner attached".*"engine":"kubernetes"/.test(await logsOf("agent-sessions-server")),
        60_000,
      ),
    ).catch(async (e: unknown) => {
      throw new Error(`${String(e)}\nrunner log:\n${await logsOf("agent-sessions-runner")}`);
    });
    const status = await rpc("GetAgentStatus", {});
    expect(status.status, JSON.stringify(status.body)).toBe(200);
    expect(status.body).toEqual({ sessions: [] });
    // The runner token (generated by the program, in the runner's Secret) is not a client credential.
    const secret = await kubectl(
      "-n",
      NS,
      "get",
      "secret",
      "agent-sessions-runner",
      "-o",
      "jsonpath={.data.token}",
    );
    const runnerToken = Buffer.from(secret.stdout, "base64").toString("utf8");
    expect(runnerToken.length).toBeGreaterThanOrEqual(43);
    expect([401, 403]).toContain((await rpc("GetAgentStatus", {}, runnerToken)).status);
  });

  it("ProvisionAgentWorkspace for an Agent bound to runtime `reference` runs the session stack from inside the cluster; StartAgentSession execs the agent; RemoveAgentWorkspace destroys it", async () => {
    expect((await putReferenceAgent(call, AGENT_NS)).image).toBe(referenceImage().image);

    const provision = await timed("provision", () =>
      rpc("ProvisionAgentWorkspace", { agent_ref: `${AGENT_NS}/a`, client_request_id: "cp-1" }),
    );
    expect(provision.status, JSON.stringify(provision.body)).toBe(200);
    const name = provision.body.container_name as string;
    provisioned.add(name);
    const deployment = await k8s.apps.readNamespacedDeployment({ namespace: SESSIONS_NS, name });
    expect(deployment.status?.readyReplicas).toBe(1);
    expect(deployment.metadata?.labels?.[Labels.namespace]).toBe(AGENT_NS);

    // Its NetworkPolicy admits the runner where it runs: pods with the runner's labels in the
    // control plane's namespace (one peer: namespaceSelector and podSelector), nothing else.
    const policy = await k8s.networking.readNamespacedNetworkPolicy({ namespace: SESSIONS_NS, name });
    expect(policy.spec?.ingress?.map((rule) => rule._from)).toEqual([
      [
        {
          namespaceSelector: {
            matchLabels: { [Labels.managedBy]: "agent-sessions", [Labels.component]: "control-plane" },
          },
          podSelector: {
            matchLabels: { [Labels.managedBy]: "agent-sessions", [Labels.component]: "runner" },
          },
        },
      ],
    ]);
    const controlPlaneNamespace = await k8s.core.readNamespace({ name: NS });
    expect(controlPlaneNamespace.metadata?.labels).toMatchObject({ [Labels.component]: "control-plane" });

    // Requests reach the adapter from the runner pod through the session's ClusterIP (kube-proxy).
    const service = await k8s.core.readNamespacedService({ namespace: SESSIONS_NS, name });
    const runner = await podOf("runner");
    const url = `http://${service.spec?.clusterIP}:8080/healthz`;
    const health = await kubectl(
      ...["-n", NS, "exec", runner.metadata!.name!, "--", "/bin/node", "-e"],
      `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then((r) => console.log(r.status))`,
    );
    expect(health.stdout.trim(), health.stderr).toBe("200");

    // The workspace files API from the in-cluster runner: exec into the pod's workspace sidecar.
    const file = `/v1/workspaces/${name}/workspace/files/notes/from-the-portal.txt`;
    const put = await fetch(`${serverUrl}${file}`, {
      method: "PUT",
      headers: { authorization: `Bearer ${adminToken}` },
      body: "written through an in-cluster runner\n",
    });
    expect(put.status, await put.clone().text()).toBe(201);
    const got = await fetch(`${serverUrl}${file}`, { headers: { authorization: `Bearer ${adminToken}` } });
    expect(await got.text()).toBe("written through an in-cluster runner\n");

    const start = await timed("start", () => rpc("StartAgentSession", { container_name: name }));
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    expect(start.body.state).toBe("READY");
    const status = await rpc("GetAgentStatus", { session_id: start.body.session_id });
    expect(status.body.sessions[0]).toMatchObject({ container_name: name, state: "READY" });
    const stop = await rpc("StopAgentSession", { session_id: start.body.session_id });
    expect(stop.body.state, JSON.stringify(stop.body)).toBe("STOPPED");

    const removed = await timed("remove", () => rpc("RemoveAgentWorkspace", { container_name: name }));
    expect(removed.status, JSON.stringify(removed.body)).toBe(200);
    provisioned.delete(name);
    // Foreground deletion: the Deployment goes once the kubelet has let its pod go.
    await until(
      "the session's Deployment to be gone",
      () => isGone(() => k8s.apps.readNamespacedDeployment({ namespace: SESSIONS_NS, name })),
      KUBERNETES_STOPPED_WITHIN_MS,
    );
    expect(
      await isGone(() =>
        k8s.core.readNamespacedPersistentVolumeClaim({ namespace: SESSIONS_NS, name: `${name}-workspace` }),
      ),
    ).toBe(true);
  });

  it("the runner's RBAC is least privilege: session objects, snapshot copy pods and pods/exec in the sessions namespace, nothing cluster-wide, nothing in the control plane's namespace", async () => {
    // [verb, resource (`pods/exec` = resource pods, subresource exec), namespace ("" = cluster scope), allowed]
    const matrix: [string, string, string, boolean][] = [
      ["create", "pods/exec", SESSIONS_NS, true],
      ["get", "pods/exec", SESSIONS_NS, true],
      ["patch", "deployments.apps", SESSIONS_NS, true],
      ["delete", "deployments.apps", SESSIONS_NS, true],
      ["create", "persistentvolumeclaims", SESSIONS_NS, true],
      ["create", "secrets", SESSIONS_NS, true],
      ["update", "services", SESSIONS_NS, true],
      ["delete", "networkpolicies.networking.k8s.io", SESSIONS_NS, true],
      ["watch", "pods", SESSIONS_NS, true],
      ["list", "replicasets.apps", SESSIONS_NS, true],
      ["get", "endpoints", SESSIONS_NS, true],
      // GET /api/v1/namespaces/agent-sessions is authorized with namespace=agent-sessions.
      ["get", `namespaces/${SESSIONS_NS}`, SESSIONS_NS, true],
      // A snapshot's copy pod (runner/kubernetes/snapshots.ts): the runner makes and deletes it,
      // admitted under the namespace's Pod Security "restricted" like every session pod (and the
      // runner could already make pods through a Deployment).
      ["create", "pods", SESSIONS_NS, true],
      ["delete", "pods", SESSIONS_NS, true],
      ["create", "pods/attach", SESSIONS_NS, false],
      ["create", "pods/portforward", SESSIONS_NS, false],
      ["create", "rolebindings.rbac.authorization.k8s.io", SESSIONS_NS, false],
      ["create", "roles.rbac.authorization.k8s.io", SESSIONS_NS, false],
      ["create", "serviceaccounts", SESSIONS_NS, false],
      ["list", "events", SESSIONS_NS, false],
      ["*", "*", SESSIONS_NS, false],
      ["get", "secrets", "kube-system", false],
      ["list", "secrets", "kube-system", false],
      ["create", "pods/exec", "kube-system", false],
      ["get", "namespaces/kube-system", "kube-system", false],
      ["list", "secrets", "default", false],
      ["list", "nodes", "", false],
      ["get", "nodes", "", false],
      ["create", "clusterroles.rbac.authorization.k8s.io", "", false],
      ["list", "clusterroles.rbac.authorization.k8s.io", "", false],
      ["create", "clusterrolebindings.rbac.authorization.k8s.io", "", false],
      ["list", "namespaces", "", false],
      ["create", "namespaces", "", false],
      ["list", "persistentvolumes", "", false],
      ["get", "secrets", NS, false],
      ["list", "pods", NS, false],
      ["create", "pods/exec", NS, false],
      ["patch", "deployments.apps", NS, false],
      ["get", "configmaps", NS, false],
    ];
    const rows = await Promise.all(
      matrix.map(async ([verb, resource, ns, allowed]) => {
        const [kind, sub] = resource.startsWith("pods/") ? resource.split("/") : [resource];
        const args = ["auth", "can-i", verb, kind!, ...(sub ? [`--subresource=${sub}`] : [])];
        const r = await kubectl(...args, "--as", RUNNER_SA, ...(ns ? ["-n", ns] : []));
        return { verb, resource, ns: ns || "(cluster)", allowed, answer: r.stdout.trim() };
      }),
    );
    console.log(
      `runner RBAC (${RUNNER_SA}):\n${rows.map((r) => `  ${r.answer.padEnd(3)} ${r.verb} ${r.resource} in ${r.ns}`).join("\n")}`,
    );
    for (const r of rows)
      expect(`${r.verb} ${r.resource} in ${r.ns}: ${r.answer}`).toBe(
        `${r.verb} ${r.resource} in ${r.ns}: ${r.allowed ? "yes" : "no"}`,
      );
    // The same through real requests as the runner's service account.
    const own = await kubectl("get", "namespace", SESSIONS_NS, "--as", RUNNER_SA, "-o", "name");
    expect(own.stdout.trim(), own.stderr).toBe(`namespace/${SESSIONS_NS}`);
    const other = await kubectl("get", "namespace", "kube-system", "--as", RUNNER_SA, "-o", "name");
    expect(other.stderr).toMatch(/Forbidden/);
    const secrets = await kubectl("-n", "kube-system", "get", "secrets", "--as", RUNNER_SA);
    expect(secrets.stderr).toMatch(/Forbidden/);
    // No ClusterRoleBinding names the runner.
    const kc = new KubeConfig();
    kc.loadFromDefault();
    const bindings = await kc.makeApiClient(RbacAuthorizationV1Api).listClusterRoleBinding();
    const toRunner = bindings.items.filter((b) =>
      (b.subjects ?? []).some((s) => s.kind === "ServiceAccount" && s.namespace === NS),
    );
    expect(toRunner.map((b) => b.metadata?.name)).toEqual([]);
  });

  it("the server pod carries no service-account token and is hardened like a session pod; the runner pod is the only one with a token", async () => {
    const server = await podOf("server");
    const spec = server.spec!;
    expect(spec.automountServiceAccountToken).toBe(false);
    expect(spec.hostNetwork ?? false).toBe(false);
    const c = spec.containers[0]!;
    expect(c.volumeMounts?.map((m) => m.mountPath).sort()).toEqual(["/tmp", "/var/lib/agent-sessions"]);
    expect(spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: "RuntimeDefault" },
    });
    expect(c.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(c.resources?.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    const ls = await kubectl(
      "-n",
      NS,
      "exec",
      server.metadata!.name!,
      "--",
      "ls",
      "/var/run/secrets/kubernetes.io/serviceaccount",
    );
    expect(ls.code, ls.stdout).not.toBe(0);
    expect(ls.stderr).toMatch(/No such file or directory/);
    const id = await kubectl("-n", NS, "exec", server.metadata!.name!, "--", "id", "-u");
    expect(id.stdout.trim()).toBe("65532");
    const write = await kubectl(
      "-n",
      NS,
      "exec",
      server.metadata!.name!,
      "--",
      "sh",
      "-c",
      "echo x > /opt/x",
    );
    expect(write.code).not.toBe(0);

    const runner = await podOf("runner");
    expect(runner.spec?.automountServiceAccountToken).toBe(true);
    expect(runner.spec?.serviceAccountName).toBe("agent-sessions-runner");
    expect(runner.spec?.containers[0]?.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    const token = await kubectl(
      "-n",
      NS,
      "exec",
      runner.metadata!.name!,
      "--",
      "ls",
      "/var/run/secrets/kubernetes.io/serviceaccount",
    );
    expect(token.stdout).toMatch(/token/);

    // Both pods meet Pod Security `restricted`, the level of the sessions namespace: asked to
    // enforce it on the control plane's namespace (server dry run), 1.35 names every running pod
    // that would violate it ("existing pods in namespace … violate …", with the fields).
    const restricted = await kubectl(
      ...["label", "--dry-run=server", "--overwrite", "namespace", NS],
      ...Object.entries(SESSIONS_NAMESPACE_POD_SECURITY).map(([key, value]) => `${key}=${value}`),
    );
    expect(restricted.code, restricted.stderr).toBe(0);
    expect(restricted.stderr).not.toMatch(/violate/);
  });

  it("a second pulumi up changes nothing and keeps the generated tokens", async () => {
    const preview = await timed("preview", () => stack.preview());
    const changes = Object.entries(preview.changeSummary).filter(([op, n]) => op !== "same" && n > 0);
    expect(changes).toEqual([]);
    const outputs = await stack.outputs();
    expect(outputs.adminToken?.value).toBe(adminToken);
    expect((await rpc("GetAgentStatus", {})).status).toBe(200);
  });

  it("pulumi destroy removes it all: namespace, workloads, volumes, the Role and RoleBinding in the sessions namespace", async () => {
    const pvcs = await k8s.core.listNamespacedPersistentVolumeClaim({ namespace: NS });
    const volumes = pvcs.items.map((p) => p.spec?.volumeName).filter((v): v is string => Boolean(v));
    expect(volumes).toHaveLength(2);
    const steps = stepTimer("destroy");
    const result = await timed("destroy", () => stack.destroy({ onEvent: steps.onEvent }));
    steps.report();
    destroyed = true;
    expect(result.summary.result).toBe("succeeded");
    expect(await isGone(() => k8s.core.readNamespace({ name: NS }))).toBe(true);
    const role = await kubectl("-n", SESSIONS_NS, "get", "role,rolebinding", `${NS}-runner`, "-o", "name");
    expect(role.stdout.trim()).toBe("");
    // The hostPath provisioner's volumes go with their claims (reclaim policy Delete).
    await until(
      "the control plane's persistent volumes to be deleted",
      async () => {
        const pvs = await k8s.core.listPersistentVolume();
        return pvs.items.every((pv) => !volumes.includes(pv.metadata?.name ?? ""));
      },
      60_000,
    );
    expect(
      (await fetch(`${serverUrl}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => null))?.ok ??
        false,
    ).toBe(false);
  });
});
