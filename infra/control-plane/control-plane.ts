/**
 * The control plane on a cluster: the server (Deployment + ClusterIP Service + data PVC, no
 * Kubernetes credentials) and one runner (Deployment + PVC, the only pod with a service-account
 * token, least-privilege RBAC in the sessions namespace), their generated tokens, and the
 * namespaces.
 *
 * "Ready" for the server means its /readyz answers (the readiness probe); the runner has no
 * port: it is up when its process runs and has dialled the server (the server logs
 * "runner attached", GetAgentStatus then answers for its sessions).
 */
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { Labels, SESSIONS_NAMESPACE_POD_SECURITY } from "../../contracts/session-spec.ts";
import { hardenedContainerSecurityContext, hardenedPodSpec } from "../kubernetes/hardening.ts";
import type { ControlPlaneConfig } from "./config.ts";
import { resourcesOf, tmpVolume } from "./pod-security.ts";
import { runnerRules } from "./runner-rbac.ts";
import { GeneratedSecret } from "./tokens.ts";

/** Where the image keeps the repository (scripts/testbed.d/control-plane-image.sh). */
const APP_DIR = "/opt/agent-sessions";
/** The data volume's mount point in both pods. */
const DATA_DIR = "/var/lib/agent-sessions";
/** The runner's model gateway port (AGENT_SESSIONS_GATEWAY_ADDRESS), reached by session pods only. */
export const GATEWAY_PORT = 8788;
/** The label value session NetworkPolicies can select the control plane's namespace by. */
export const CONTROL_PLANE_COMPONENT = "control-plane";

/** Labels as `k=v,k=v`, the runner's environment form. */
const labelPairs = (labels: Record<string, string>) =>
  Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");

export interface ControlPlaneArgs {
  config: ControlPlaneConfig;
  /**
   * The PostgreSQL store's connection string (a Pulumi secret): the server replicas keep their
   * state there instead of a volume, so `config.serverReplicas` may be more than 1.
   * @default none (SQLite on the server's volume, one replica)
   */
  databaseUrl?: pulumi.Input<string>;
  provider?: k8s.Provider;
}

export class ControlPlane extends pulumi.ComponentResource {
  readonly namespace: pulumi.Output<string>;
  readonly sessionsNamespace: pulumi.Output<string>;
  /** `http://<ClusterIP>:<port>`: the server inside the cluster (and from the node, via kube-proxy). */
  readonly serverUrl: pulumi.Output<string>;
  readonly serverService: pulumi.Output<string>;
  readonly runnerServiceAccount: pulumi.Output<string>;
  /** The admin (client API) bearer token. Secret. */
  readonly adminToken: pulumi.Output<string>;

  constructor(name: string, args: ControlPlaneArgs, opts?: pulumi.ComponentResourceOptions) {
    super("agent-sessions:control-plane:ControlPlane", name, {}, opts);
    const { config } = args;
    const shared = args.databaseUrl !== undefined;
    if (config.serverReplicas > 1 && !shared)
      throw new Error(
        `serverReplicas ${config.serverReplicas} needs the PostgreSQL store: set the secret config databaseUrl (pulumi config set --secret databaseUrl postgres://…)`,
      );
    const child = { parent: this, ...(args.provider ? { provider: args.provider } : {}) };
    const managed = { [Labels.managedBy]: "agent-sessions" };

    const ns = new k8s.core.v1.Namespace(
      `${name}-namespace`,
      {
        metadata: {
          name: config.namespace,
          labels: { ...managed, [Labels.component]: CONTROL_PLANE_COMPONENT },
        },
      },
      child,
    );
    const namespace = ns.metadata.name;
    const sessionsNs = config.createSessionsNamespace
      ? new k8s.core.v1.Namespace(
          `${name}-sessions-namespace`,
          {
            metadata: {
              name: config.sessionsNamespace,
              labels: { ...managed, [Labels.component]: "sessions", ...SESSIONS_NAMESPACE_POD_SECURITY },
            },
          },
          child,
        )
      : undefined;
    const sessionsNamespace = sessionsNs ? sessionsNs.metadata.name : pulumi.output(config.sessionsNamespace);
    const storageClass = config.storageClassName ? { storageClassName: config.storageClassName } : {};

    // ── tokens ───────────────────────────────────────────────────────────────────────────────
    const admin = new GeneratedSecret(
      `${name}-admin-token`,
      { metadata: { name: "agent-sessions-admin-token", namespace, labels: managed }, generated: ["token"] },
      child,
    );

    // ── server ───────────────────────────────────────────────────────────────────────────────
    const serverLabels = { ...managed, [Labels.component]: "server" };
    const serverSa = new k8s.core.v1.ServiceAccount(
      `${name}-server`,
      {
        metadata: { name: "agent-sessions-server", namespace, labels: serverLabels },
        // The server holds no engine code and needs no Kubernetes API: no token anywhere.
        automountServiceAccountToken: false,
      },
      child,
    );
    // SQLite: the store on a volume of its own. PostgreSQL: the store is the database, reached
    // through a Secret holding its URL (never a plain env value in the Deployment).
    const serverData = shared
      ? undefined
      : new k8s.core.v1.PersistentVolumeClaim(
          `${name}-server-data`,
          {
            metadata: { name: "agent-sessions-server-data", namespace, labels: serverLabels },
            spec: {
              accessModes: ["ReadWriteOnce"],
              resources: { requests: { storage: config.serverStorage } },
              ...storageClass,
            },
          },
          { ...child, protect: config.protectData },
        );
    const database =
      args.databaseUrl === undefined
        ? undefined
        : new k8s.core.v1.Secret(
            `${name}-database`,
            {
              metadata: { name: "agent-sessions-database", namespace, labels: managed },
              type: "Opaque",
              stringData: { url: pulumi.secret(args.databaseUrl) },
            },
            child,
          );
    const service = new k8s.core.v1.Service(
      `${name}-server`,
      {
        metadata: {
          name: "agent-sessions-server",
          namespace,
          labels: serverLabels,
          // Its endpoints come with the server pod, which the Deployment's own await waits for;
          // awaiting them here first would only stall the Secret that needs the ClusterIP.
          annotations: { "pulumi.com/skipAwait": "true" },
        },
        spec: {
          type: "ClusterIP",
          selector: serverLabels,
          ports: [{ name: "http", port: config.serverPort, targetPort: "http", protocol: "TCP" }],
        },
      },
      child,
    );
    const serverUrl = pulumi.interpolate`http://${service.spec.clusterIP}:${config.serverPort}`;

    // The runner's Secret: its token (the server checks it too) and where the server is.
    const runner = new GeneratedSecret(
      `${name}-runner`,
      {
        metadata: { name: "agent-sessions-runner", namespace, labels: managed },
        generated: ["token"],
        plain: { serverUrl },
      },
      child,
    );
    // The passphrase of the session stacks' secrets provider, apart from the token: the token may
    // be rotated (replace its Secret), the passphrase may not (the session stacks' config is
    // encrypted with it; changing it takes `pulumi stack change-secrets-provider` on each).
    const passphrase = new GeneratedSecret(
      `${name}-runner-passphrase`,
      {
        metadata: { name: "agent-sessions-runner-passphrase", namespace, labels: managed },
        generated: ["passphrase"],
      },
      { ...child, protect: config.protectData },
    );
    const fromSecret = (envName: string, secretName: pulumi.Input<string>, key: string) => ({
      name: envName,
      valueFrom: { secretKeyRef: { name: secretName, key } },
    });

    const server = new k8s.apps.v1.Deployment(
      `${name}-server`,
      {
        metadata: { name: "agent-sessions-server", namespace, labels: serverLabels },
        spec: {
          replicas: config.serverReplicas,
          // SQLite: one writer of the store on a ReadWriteOnce volume, never two pods at once.
          // PostgreSQL: replicas share the database, so a rollout replaces them one by one.
          strategy: shared
            ? { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } }
            : { type: "Recreate" },
          selector: { matchLabels: serverLabels },
          template: {
            metadata: { labels: serverLabels },
            spec: {
              serviceAccountName: serverSa.metadata.name,
              ...hardenedPodSpec(),
              containers: [
                {
                  name: "server",
                  image: config.image,
                  imagePullPolicy: "IfNotPresent",
                  args: [
                    "serve",
                    "--no-runner",
                    "--port",
                    String(config.serverPort),
                    "--data-dir",
                    `${DATA_DIR}/server`,
                  ],
                  env: [
                    { name: "AGENT_SESSIONS_HOST", value: "0.0.0.0" },
                    fromSecret("AGENT_SESSIONS_TOKEN", admin.secret.metadata.name, "token"),
                    fromSecret("AGENT_SESSIONS_RUNNER_TOKEN", runner.secret.metadata.name, "token"),
                    ...(database
                      ? [fromSecret("AGENT_SESSIONS_DATABASE_URL", database.metadata.name, "url")]
                      : []),
                    ...(config.referenceImage
                      ? [{ name: "AGENT_SESSIONS_REFERENCE_IMAGE", value: config.referenceImage }]
                      : []),
                  ],
                  ports: [{ name: "http", containerPort: config.serverPort, protocol: "TCP" }],
                  securityContext: hardenedContainerSecurityContext(),
                  resources: resourcesOf(config.serverResources),
                  readinessProbe: { httpGet: { path: "/readyz", port: "http" }, periodSeconds: 2 },
                  livenessProbe: {
                    httpGet: { path: "/healthz", port: "http" },
                    periodSeconds: 10,
                    failureThreshold: 3,
                  },
                  volumeMounts: [
                    { name: "data", mountPath: DATA_DIR },
                    { name: "tmp", mountPath: "/tmp" },
                  ],
                },
              ],
              volumes: [
                serverData
                  ? { name: "data", persistentVolumeClaim: { claimName: serverData.metadata.name } }
                  : { name: "data", emptyDir: { sizeLimit: "64Mi" } },
                tmpVolume("64Mi", true),
              ],
            },
          },
        },
      },
      child,
    );

    // ── runner ───────────────────────────────────────────────────────────────────────────────
    // The component label is what session NetworkPolicies admit (SessionSpec.kubernetes.runnerSelector).
    const runnerLabels = { ...managed, [Labels.component]: "runner" };
    const runnerSa = new k8s.core.v1.ServiceAccount(
      `${name}-runner`,
      { metadata: { name: "agent-sessions-runner", namespace, labels: runnerLabels } },
      child,
    );
    const role = new k8s.rbac.v1.Role(
      `${name}-runner`,
      {
        // Named after the control plane's namespace: several control planes may share one
        // sessions namespace only if they never share names in it.
        metadata: {
          name: pulumi.interpolate`${namespace}-runner`,
          namespace: sessionsNamespace,
          labels: managed,
        },
        rules: runnerRules(config.sessionsNamespace),
      },
      child,
    );
    const binding = new k8s.rbac.v1.RoleBinding(
      `${name}-runner`,
      {
        metadata: {
          name: pulumi.interpolate`${namespace}-runner`,
          namespace: sessionsNamespace,
          labels: managed,
        },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role.metadata.name },
        subjects: [{ kind: "ServiceAccount", name: runnerSa.metadata.name, namespace }],
      },
      child,
    );
    const runnerData = new k8s.core.v1.PersistentVolumeClaim(
      `${name}-runner-data`,
      {
        metadata: { name: "agent-sessions-runner-data", namespace, labels: runnerLabels },
        spec: {
          accessModes: ["ReadWriteOnce"],
          resources: { requests: { storage: config.runnerStorage } },
          ...storageClass,
        },
      },
      { ...child, protect: config.protectData },
    );
    new k8s.apps.v1.Deployment(
      `${name}-runner`,
      {
        metadata: { name: "agent-sessions-runner", namespace, labels: runnerLabels },
        spec: {
          replicas: 1,
          // The session stacks' state lives on a ReadWriteOnce volume: one runner pod at a time.
          strategy: { type: "Recreate" },
          selector: { matchLabels: runnerLabels },
          template: {
            metadata: {
              labels: runnerLabels,
              // The server URL reaches the runner through its Secret, read at container start:
              // a new URL (a recreated Service) rolls the pod.
              annotations: { "agent-sessions.dev/server-url": serverUrl },
            },
            spec: {
              serviceAccountName: runnerSa.metadata.name,
              ...hardenedPodSpec(),
              // The one pod with Kubernetes credentials: the runner drives session stacks and execs.
              automountServiceAccountToken: true,
              containers: [
                {
                  name: "runner",
                  image: config.image,
                  imagePullPolicy: "IfNotPresent",
                  command: ["/bin/sh", `${APP_DIR}/infra/control-plane/runner-entrypoint.sh`],
                  env: [
                    fromSecret("AGENT_SESSIONS_SERVER_URL", runner.secret.metadata.name, "serverUrl"),
                    fromSecret("AGENT_SESSIONS_RUNNER_TOKEN", runner.secret.metadata.name, "token"),
                    fromSecret("PULUMI_CONFIG_PASSPHRASE", passphrase.secret.metadata.name, "passphrase"),
                    { name: "AGENT_SESSIONS_ENGINE", value: "kubernetes" },
                    // The server speaks plain HTTP on its ClusterIP (this program gives it no TLS):
                    // the link stays inside the cluster network. Off-cluster runners need wss://.
                    { name: "AGENT_SESSIONS_RUNNER_ALLOW_INSECURE", value: "true" },
                    {
                      name: "AGENT_SESSIONS_RUNNER_NAME",
                      value: config.runnerName ?? `${config.namespace}-runner`,
                    },
                    { name: "AGENT_SESSIONS_RUNNER_CAPACITY", value: String(config.runnerCapacity) },
                    { name: "AGENT_SESSIONS_KUBERNETES_NAMESPACE", value: sessionsNamespace },
                    // What session NetworkPolicies admit: this pod's labels in this namespace
                    // (by its labels), not pods of the sessions namespace (runner/kubernetes/config.ts).
                    { name: "AGENT_SESSIONS_RUNNER_POD_LABELS", value: labelPairs(runnerLabels) },
                    {
                      name: "AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS",
                      value: labelPairs({ ...managed, [Labels.component]: CONTROL_PLANE_COMPONENT }),
                    },
                    { name: "AGENT_SESSIONS_STATE_DIR", value: DATA_DIR },
                    // Sessions reach their model only through this runner's gateway (runner/gateway/),
                    // at the pod's own address; the NetworkPolicy below admits session pods there.
                    { name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
                    { name: "AGENT_SESSIONS_GATEWAY_ADDRESS", value: `$(POD_IP):${GATEWAY_PORT}` },
                    ...(config.gitImage
                      ? [{ name: "AGENT_SESSIONS_GIT_IMAGE", value: config.gitImage }]
                      : []),
                    // Plugins come with the image; never reach out for one.
                    { name: "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", value: "true" },
                  ],
                  ports: [{ name: "gateway", containerPort: GATEWAY_PORT, protocol: "TCP" }],
                  securityContext: hardenedContainerSecurityContext(),
                  resources: resourcesOf(config.runnerResources),
                  volumeMounts: [
                    { name: "data", mountPath: DATA_DIR },
                    { name: "tmp", mountPath: "/tmp" },
                  ],
                },
              ],
              volumes: [
                { name: "data", persistentVolumeClaim: { claimName: runnerData.metadata.name } },
                tmpVolume("1Gi", false),
              ],
            },
          },
        },
      },
      // Without its binding the runner's first stack operation would be refused.
      { ...child, dependsOn: [binding, server] },
    );

    // Intent for clusters whose network plugin enforces NetworkPolicy: the server takes its API
    // port from anywhere (clients, an ingress), the runner only its model gateway's port, from
    // the session pods of its sessions namespace (otherwise it only dials out: the API server,
    // the server, the session adapters).
    new k8s.networking.v1.NetworkPolicy(
      `${name}-server`,
      {
        metadata: { name: "agent-sessions-server", namespace, labels: serverLabels },
        spec: {
          podSelector: { matchLabels: serverLabels },
          policyTypes: ["Ingress"],
          ingress: [{ ports: [{ port: config.serverPort, protocol: "TCP" }] }],
        },
      },
      child,
    );
    new k8s.networking.v1.NetworkPolicy(
      `${name}-runner`,
      {
        metadata: { name: "agent-sessions-runner", namespace, labels: runnerLabels },
        spec: {
          podSelector: { matchLabels: runnerLabels },
          policyTypes: ["Ingress"],
          ingress: [
            {
              from: [
                {
                  namespaceSelector: {
                    matchLabels: { "kubernetes.io/metadata.name": sessionsNamespace },
                  },
                  podSelector: { matchLabels: { [Labels.managedBy]: "agent-sessions" } },
                },
              ],
              ports: [{ port: GATEWAY_PORT, protocol: "TCP" }],
            },
          ],
        },
      },
      child,
    );

    this.namespace = namespace;
    this.sessionsNamespace = sessionsNamespace;
    this.serverUrl = serverUrl;
    this.serverService = service.metadata.name;
    this.runnerServiceAccount = runnerSa.metadata.name;
    this.adminToken = pulumi.secret(admin.values.apply((v) => v.token ?? ""));
    this.registerOutputs({
      namespace: this.namespace,
      sessionsNamespace: this.sessionsNamespace,
      serverUrl: this.serverUrl,
      serverService: this.serverService,
      runnerServiceAccount: this.runnerServiceAccount,
      adminToken: this.adminToken,
    });
  }
}
