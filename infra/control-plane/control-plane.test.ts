import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";
import { custom, installMocks, outputValue, type Recorded } from "../test-mocks.ts";
import { ControlPlaneConfig } from "./config.ts";
import { runnerRules } from "./runner-rbac.ts";

const image = `127.0.0.1:5000/agent-sessions/control-plane@sha256:${"c".repeat(64)}`;
let recorded: Recorded[];
let mod: typeof import("./control-plane.ts");
beforeAll(async () => {
  recorded = installMocks();
  mod = await import("./control-plane.ts");
});

// biome-ignore lint/suspicious/noExplicitAny: test reads into recorded manifests
type Obj = Record<string, any>;
/** Registration is asynchronous (names are outputs): wait until no new resource arrives for a while. */
async function settled(): Promise<void> {
  let last = -1;
  while (last !== recorded.length) {
    last = recorded.length;
    await new Promise((r) => setTimeout(r, 50));
  }
}
const byTypeAndName = (type: string, name: string) =>
  custom(recorded).find((r) => r.type === type && (r.inputs as Obj).metadata?.name === name)?.inputs as Obj;

describe("ControlPlane component", () => {
  it("declares namespaces, the server, the runner with a namespaced Role only, and generated token Secrets", async () => {
    recorded.length = 0;
    const cp = new mod.ControlPlane("cp", { config: ControlPlaneConfig.parse({ image }) });
    expect(await outputValue(cp.serverUrl)).toBe("http://10.0.0.42:8787");
    await settled();
    const types = custom(recorded).map((r) => r.type);
    expect(types.filter((t) => t === "kubernetes:core/v1:Namespace")).toHaveLength(2);
    expect(types).not.toContain("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole");
    expect(types).not.toContain("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding");

    const role = byTypeAndName(
      "kubernetes:rbac.authorization.k8s.io/v1:Role",
      "agent-sessions-system-runner",
    );
    expect(role.metadata.namespace).toBe("agent-sessions");
    expect(role.rules).toEqual(runnerRules("agent-sessions"));
    const binding = byTypeAndName(
      "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
      "agent-sessions-system-runner",
    );
    expect(binding.subjects).toEqual([
      { kind: "ServiceAccount", name: "agent-sessions-runner", namespace: "agent-sessions-system" },
    ]);

    const server = byTypeAndName("kubernetes:apps/v1:Deployment", "agent-sessions-server").spec.template.spec;
    expect(server.automountServiceAccountToken).toBe(false);
    expect(server.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: "RuntimeDefault" },
    });
    const s = server.containers[0];
    expect(s.image).toBe(image);
    expect(s.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
    });
    expect(s.resources.limits).toEqual({ cpu: "500m", memory: "512Mi" });
    // Tokens come from Secrets, never as literal values in the pod spec.
    for (const e of s.env as Obj[])
      if (/TOKEN/.test(e.name)) expect(e.valueFrom.secretKeyRef.key).toBe("token");
    const serverSa = byTypeAndName("kubernetes:core/v1:ServiceAccount", "agent-sessions-server");
    expect(serverSa.automountServiceAccountToken).toBe(false);

    const runner = byTypeAndName("kubernetes:apps/v1:Deployment", "agent-sessions-runner").spec.template;
    expect(runner.metadata.labels["agent-sessions.dev/component"]).toBe("runner");
    expect(runner.spec.automountServiceAccountToken).toBe(true);
    expect(runner.spec.serviceAccountName).toBe("agent-sessions-runner");
    const env = Object.fromEntries((runner.spec.containers[0].env as Obj[]).map((e) => [e.name, e]));
    expect(env.AGENT_SESSIONS_SERVER_URL.valueFrom.secretKeyRef).toEqual({
      name: "agent-sessions-runner",
      key: "serverUrl",
    });
    expect(env.PULUMI_CONFIG_PASSPHRASE.valueFrom.secretKeyRef.name).toBe("agent-sessions-runner-passphrase");
    expect(env.PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION.value).toBe("true");
    // Sessions reach their model through the runner's gateway at the pod's address (issue 35).
    expect(env.POD_IP.valueFrom.fieldRef.fieldPath).toBe("status.podIP");
    expect(env.AGENT_SESSIONS_GATEWAY_ADDRESS.value).toBe("$(POD_IP):8788");
    const runnerPolicy = byTypeAndName(
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
      "agent-sessions-runner",
    );
    expect(runnerPolicy.spec.ingress).toEqual([
      {
        from: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "agent-sessions" } },
            podSelector: { matchLabels: { "agent-sessions.dev/managed-by": "agent-sessions" } },
          },
        ],
        ports: [{ port: 8788, protocol: "TCP" }],
      },
    ]);
    // Session NetworkPolicies admit the runner pod in this namespace, by both labels.
    expect(env.AGENT_SESSIONS_RUNNER_POD_LABELS.value).toBe(
      "agent-sessions.dev/managed-by=agent-sessions,agent-sessions.dev/component=runner",
    );
    expect(env.AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS.value).toBe(
      "agent-sessions.dev/managed-by=agent-sessions,agent-sessions.dev/component=control-plane",
    );

    const admin = byTypeAndName("kubernetes:core/v1:Secret", "agent-sessions-admin-token");
    // Registered as a Pulumi secret (the engine's secret signature wraps the value).
    expect(admin.data["4dabf18193072939515e22adb298388d"]).toBe("1b47061264138c4ac30d75fd1eb44270");
    const token = Buffer.from(admin.data.value.token, "base64").toString();
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await outputValue(cp.adminToken)).toBe(token);
  });

  it("leaves an existing sessions namespace alone when asked", async () => {
    recorded.length = 0;
    const cp = new mod.ControlPlane("cp2", {
      config: ControlPlaneConfig.parse({ image, namespace: "cp2", createSessionsNamespace: false }),
    });
    expect(await outputValue(cp.sessionsNamespace)).toBe("agent-sessions");
    await settled();
    const namespaces = custom(recorded).filter((r) => r.type === "kubernetes:core/v1:Namespace");
    expect(namespaces.map((n) => (n.inputs as Obj).metadata.name)).toEqual(["cp2"]);
  });
});

describe("ControlPlane with the PostgreSQL store", () => {
  it("deploys N server replicas sharing the database, its URL only in a Secret registered as a Pulumi secret", async () => {
    recorded.length = 0;
    const url = "postgres://agent:s3cret-pw@db.internal:5432/agent_sessions";
    new mod.ControlPlane("cp3", {
      config: ControlPlaneConfig.parse({ image, namespace: "cp3", serverReplicas: 3 }),
      databaseUrl: pulumi.secret(url),
    });
    await settled();
    const deployment = byTypeAndName("kubernetes:apps/v1:Deployment", "agent-sessions-server");
    expect(deployment.spec.replicas).toBe(3);
    expect(deployment.spec.strategy).toEqual({
      type: "RollingUpdate",
      rollingUpdate: { maxUnavailable: 0, maxSurge: 1 },
    });
    const env = Object.fromEntries(
      (deployment.spec.template.spec.containers[0].env as Obj[]).map((e) => [e.name, e]),
    );
    expect(env.AGENT_SESSIONS_DATABASE_URL).toEqual({
      name: "AGENT_SESSIONS_DATABASE_URL",
      valueFrom: { secretKeyRef: { name: "agent-sessions-database", key: "url" } },
    });
    // No volume claim for a store the replicas do not keep.
    const claims = custom(recorded).filter((r) => r.type === "kubernetes:core/v1:PersistentVolumeClaim");
    expect(claims.map((c) => (c.inputs as Obj).metadata.name)).toEqual(["agent-sessions-runner-data"]);
    const secret = byTypeAndName("kubernetes:core/v1:Secret", "agent-sessions-database");
    // Registered as a Pulumi secret (the engine's secret signature wraps the value).
    expect(secret.stringData["4dabf18193072939515e22adb298388d"]).toBe("1b47061264138c4ac30d75fd1eb44270");
    expect(secret.stringData.value.url).toBe(url);
    // The URL appears nowhere else in what was registered.
    const elsewhere = custom(recorded).filter((r) => r !== custom(recorded).find((x) => x.inputs === secret));
    expect(JSON.stringify(elsewhere.map((r) => r.inputs))).not.toContain("s3cret-pw");
  });

  it("refuses more than one server replica without a database", () => {
    expect(
      () =>
        new mod.ControlPlane("cp4", {
          config: ControlPlaneConfig.parse({ image, namespace: "cp4", serverReplicas: 2 }),
        }),
    ).toThrow(/serverReplicas 2 needs the PostgreSQL store/);
  });
});

describe("ControlPlaneConfig", () => {
  it("requires a digest-pinned image and distinct namespaces", () => {
    expect(ControlPlaneConfig.safeParse({ image: "127.0.0.1:5000/x:latest" }).success).toBe(false);
    expect(ControlPlaneConfig.safeParse({ image, namespace: "a", sessionsNamespace: "a" }).success).toBe(
      false,
    );
    expect(ControlPlaneConfig.parse({ image })).toMatchObject({
      namespace: "agent-sessions-system",
      sessionsNamespace: "agent-sessions",
      createSessionsNamespace: true,
      runnerCapacity: 100,
      protectData: false,
    });
  });
});
