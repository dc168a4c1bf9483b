import { beforeAll, describe, expect, it } from "vitest";
import { SessionSpec } from "../../contracts/session-spec.ts";
import { custom, installMocks, outputValue, type Recorded } from "../test-mocks.ts";

const image = `127.0.0.1:5000/agent-sessions/reference@sha256:${"b".repeat(64)}`;
let recorded: Recorded[];
let mod: typeof import("./session.ts");
beforeAll(async () => {
  recorded = installMocks();
  mod = await import("./session.ts");
});

// biome-ignore lint/suspicious/noExplicitAny: test reads into recorded manifests
type Obj = Record<string, any>;

describe("KubernetesSession component", () => {
  it("registers PVC, Secret, hardened Deployment, ClusterIP Service and NetworkPolicy", async () => {
    recorded.length = 0;
    const spec = SessionSpec.parse({
      namespace: "default",
      name: "alpha",
      engine: "kubernetes",
      image,
      contract: "v1alpha2",
      egress: [{ cidr: "10.213.0.1", port: 11434 }],
    });
    const s = new mod.KubernetesSession("alpha", {
      spec,
      credentials: { MODEL_API_KEY: "sk-1" },
      adapterToken: "tok",
    });
    expect(await outputValue(s.endpoint)).toBe("10.0.0.42:8080");
    expect(await outputValue(s.workloadName)).toBe("as-default-alpha");
    const byType = Object.fromEntries(custom(recorded).map((r) => [r.type, r.inputs as Obj]));
    expect(Object.keys(byType).sort()).toEqual([
      "kubernetes:apps/v1:Deployment",
      "kubernetes:core/v1:PersistentVolumeClaim",
      "kubernetes:core/v1:Secret",
      "kubernetes:core/v1:Service",
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    ]);
    const dep = byType["kubernetes:apps/v1:Deployment"]!;
    expect(dep.spec.replicas).toBe(1);
    expect(dep.spec.strategy).toEqual({ type: "Recreate" });
    const pod = dep.spec.template.spec;
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.enableServiceLinks).toBe(false);
    expect(pod.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: "RuntimeDefault" },
    });
    const c = pod.containers[0];
    expect(c.image).toBe(image);
    expect(c.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(c.resources.limits).toEqual({ cpu: "500m", memory: "512Mi" });
    // CPU reserved at a tenth of the limit (compressible, sessions idle); memory at the limit.
    expect(c.resources.requests).toEqual({ cpu: "50m", memory: "512Mi" });
    expect(c.readinessProbe.httpGet.path).toBe("/readyz");
    expect(c.livenessProbe.httpGet.path).toBe("/healthz");
    expect(pod.volumes.map((v: Obj) => Object.keys(v).find((k) => k !== "name"))).toEqual([
      "persistentVolumeClaim",
      "emptyDir",
    ]);
    const creds = c.env.find((e: Obj) => e.name === "MODEL_API_KEY");
    expect(creds.valueFrom.secretKeyRef.key).toBe("MODEL_API_KEY");
    expect(creds.value).toBeUndefined();
    const svc = byType["kubernetes:core/v1:Service"]!;
    expect(svc.spec).toMatchObject({ type: "ClusterIP", ports: [{ port: 8080, protocol: "TCP" }] });
    const np = byType["kubernetes:networking.k8s.io/v1:NetworkPolicy"]!;
    expect(np.spec.policyTypes).toEqual(["Ingress", "Egress"]);
    expect(np.spec.podSelector.matchLabels).toEqual(dep.spec.selector.matchLabels);
    expect(np.spec.egress[1]).toEqual({
      to: [{ ipBlock: { cidr: "10.213.0.1/32" } }],
      ports: [{ port: 11434, protocol: "TCP" }],
    });
    // The runner in the sessions namespace: its pods by label, nothing else.
    expect(np.spec.ingress).toEqual([
      {
        from: [{ podSelector: { matchLabels: { "agent-sessions.dev/component": "runner" } } }],
        ports: [{ port: 8080, protocol: "TCP" }],
      },
    ]);
  });

  it("admits a runner in another namespace by one peer of namespaceSelector and podSelector, plus its node CIDR", async () => {
    recorded.length = 0;
    const spec = SessionSpec.parse({
      namespace: "default",
      name: "beta",
      engine: "kubernetes",
      image,
      contract: "v1alpha2",
      kubernetes: {
        namespace: "agent-sessions",
        runnerSelector: { "agent-sessions.dev/component": "runner" },
        runnerNamespaceSelector: { "agent-sessions.dev/component": "control-plane" },
        runnerCidr: "10.213.0.1/32",
      },
    });
    new mod.KubernetesSession("beta", { spec, credentials: {}, adapterToken: "tok" });
    await new Promise((r) => setTimeout(r, 50));
    const np = custom(recorded).find((r) => r.type === "kubernetes:networking.k8s.io/v1:NetworkPolicy")
      ?.inputs as Obj;
    expect(np.spec.ingress[0].from).toEqual([
      {
        namespaceSelector: { matchLabels: { "agent-sessions.dev/component": "control-plane" } },
        podSelector: { matchLabels: { "agent-sessions.dev/component": "runner" } },
      },
      { ipBlock: { cidr: "10.213.0.1/32" } },
    ]);
  });
  it("with a workspace image, the pod gets a hardened `workspace` sidecar: the volume and its own scratch, no credentials", async () => {
    recorded.length = 0;
    const git = `127.0.0.1:5000/agent-sessions/base@sha256:${"c".repeat(64)}`;
    const spec = SessionSpec.parse({
      namespace: "default",
      name: "gamma",
      engine: "kubernetes",
      image,
      contract: "v1alpha2",
      kubernetes: { namespace: "agent-sessions", workspaceImage: git },
    });
    new mod.KubernetesSession("gamma", { spec, credentials: { MODEL_API_KEY: "sk-1" }, adapterToken: "tok" });
    await new Promise((r) => setTimeout(r, 50));
    const dep = custom(recorded).find((r) => r.type === "kubernetes:apps/v1:Deployment")?.inputs as Obj;
    const pod = dep.spec.template.spec;
    expect(pod.containers.map((c: Obj) => c.name)).toEqual(["adapter", "workspace"]);
    const sidecar = pod.containers[1];
    expect(sidecar.image).toBe(git);
    expect(sidecar.securityContext).toEqual(pod.containers[0].securityContext);
    expect(sidecar.ports).toBeUndefined();
    expect(JSON.stringify(sidecar.env)).not.toMatch(/MODEL_API_KEY|ADAPTER_TOKEN|secretKeyRef/);
    expect(sidecar.volumeMounts).toEqual([
      { name: "workspace", mountPath: "/workspace" },
      { name: "workspace-scratch", mountPath: "/scratch" },
    ]);
    expect(sidecar.resources.limits).toEqual({ cpu: "500m", memory: "256Mi" });
    expect(pod.volumes.find((v: Obj) => v.name === "workspace-scratch")).toEqual({
      name: "workspace-scratch",
      emptyDir: { sizeLimit: "256Mi" },
    });
    expect(dep.spec.template.metadata.annotations).toEqual({
      "kubectl.kubernetes.io/default-container": "adapter",
    });
  });

  it("an openai-chat harness: its port in the pod and the policy, /healthz for readiness, the contract version set, the Service's port kept", async () => {
    recorded.length = 0;
    const spec = SessionSpec.parse({
      namespace: "default",
      name: "epsilon",
      engine: "kubernetes",
      image,
      contract: "v1alpha2",
      session: { protocol: "openai-chat", port: 9090 },
    });
    const s = new mod.KubernetesSession("epsilon", { spec, credentials: {}, adapterToken: "tok" });
    expect(await outputValue(s.endpoint)).toBe("10.0.0.42:8080");
    await new Promise((r) => setTimeout(r, 50));
    const byType = Object.fromEntries(custom(recorded).map((r) => [r.type, r.inputs as Obj]));
    const c = byType["kubernetes:apps/v1:Deployment"]!.spec.template.spec.containers[0];
    expect(c.ports).toEqual([{ name: "adapter", containerPort: 9090, protocol: "TCP" }]);
    expect(c.readinessProbe.httpGet).toEqual({ path: "/healthz", port: 9090 });
    expect(c.livenessProbe.httpGet).toEqual({ path: "/healthz", port: 9090 });
    expect(c.env).toContainEqual({ name: "SYMPOZIUM_HARNESS_CONTRACT_VERSION", value: "v1alpha2" });
    expect(c.env).toContainEqual({ name: "ADAPTER_PORT", value: "9090" });
    expect(byType["kubernetes:core/v1:Service"]!.spec.ports).toEqual([
      { name: "adapter", port: 8080, targetPort: 9090, protocol: "TCP" },
    ]);
    expect(byType["kubernetes:networking.k8s.io/v1:NetworkPolicy"]!.spec.ingress[0].ports).toEqual([
      { port: 9090, protocol: "TCP" },
    ]);
  });

  it("without one, the pod is the adapter alone, as before", async () => {
    recorded.length = 0;
    const spec = SessionSpec.parse({
      namespace: "default",
      name: "delta",
      engine: "kubernetes",
      image,
      contract: "v1alpha2",
    });
    new mod.KubernetesSession("delta", { spec, credentials: {}, adapterToken: "tok" });
    await new Promise((r) => setTimeout(r, 50));
    const dep = custom(recorded).find((r) => r.type === "kubernetes:apps/v1:Deployment")?.inputs as Obj;
    expect(dep.spec.template.spec.containers.map((c: Obj) => c.name)).toEqual(["adapter"]);
    expect(dep.spec.template.metadata.annotations).toBeUndefined();
  });
});

describe("cpuRequestOf", () => {
  it("reserves a tenth of the CPU limit, at least 10m, for millicores and cores alike", async () => {
    const { cpuRequestOf } = await import("./session.ts");
    expect(cpuRequestOf("500m")).toBe("50m");
    expect(cpuRequestOf("2")).toBe("200m");
    expect(cpuRequestOf("1.5")).toBe("150m");
    expect(cpuRequestOf("50m")).toBe("10m");
  });

  it("a session with skills gets a ConfigMap of the stack, mounted read-only at /skills with mode 0444 (issue 39)", async () => {
    recorded.length = 0;
    const spec = SessionSpec.parse({
      namespace: "default",
      name: "skilled",
      engine: "kubernetes",
      image,
      contract: "v1alpha2",
      skills: [{ pack: "tips", name: "greeting", description: "How to greet", content: "# Greeting" }],
    });
    new mod.KubernetesSession("skilled", { spec, credentials: {}, adapterToken: "tok" });
    await new Promise((r) => setTimeout(r, 50));
    const map = recorded.find((r) => r.type === "kubernetes:core/v1:ConfigMap")?.inputs as Obj;
    expect(map.metadata.name).toBe("as-default-skilled-skills");
    expect(map.data["tips.greeting.md"]).toContain("# Greeting");
    const deployment = recorded.find((r) => r.type === "kubernetes:apps/v1:Deployment")?.inputs as Obj;
    const pod = deployment.spec.template.spec;
    expect(pod.volumes).toContainEqual({
      name: "skills",
      configMap: {
        name: "as-default-skilled-skills",
        defaultMode: 0o444,
        items: [{ key: "tips.greeting.md", path: "tips/greeting.md" }],
      },
    });
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: "skills",
      mountPath: "/skills",
      readOnly: true,
    });
  });
});
