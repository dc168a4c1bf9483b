/**
 * Inputs of the agent-sessions Docker provider's resources (`agent-sessions-docker` plugin,
 * a Node.js Pulumi provider over the Docker Engine API; see PROVIDER.md beside this file for why
 * it is ours and not pulumi-docker). The policy pack reads the same shapes.
 */
export const DOCKER_PROVIDER = "agent-sessions-docker";
export const DockerTypes = {
  volume: `${DOCKER_PROVIDER}:index:Volume`,
  network: `${DOCKER_PROVIDER}:index:Network`,
  container: `${DOCKER_PROVIDER}:index:Container`,
} as const;

export interface VolumeInputs {
  /** Engine-level volume name. */
  name: string;
  labels: Record<string, string>;
}

export interface NetworkInputs {
  name: string;
  /** `--internal`: no route to other networks. Required by policy. */
  internal: boolean;
  /**
   * An internal network still reaches host services listening on 0.0.0.0 through its bridge
   * gateway (Docker's `--internal` isolates networks, not the host). With this set the provider adds an iptables INPUT rule dropping new
   * connections from the bridge to the host, so no session can reach control-plane ports.
   */
  isolateFromHost: boolean;
  /** Host-local endpoints the session may reach (through the gateway): the Agent's model endpoints. */
  allowedEgress: { address: string; port: number }[];
  labels: Record<string, string>;
}

export interface MountInput {
  /** Only `volume` (the session volume) and `tmpfs` are allowed by policy; never `bind`. */
  type: "volume" | "bind" | "tmpfs";
  source?: string;
  target: string;
  readOnly?: boolean;
  /** tmpfs size in bytes. */
  sizeBytes?: number;
}

export interface ContainerInputs {
  name: string;
  /** Image pinned by digest: `registry/repo@sha256:…`. */
  image: string;
  /** Plain environment (never credentials: those go in `secretEnv`). */
  env: Record<string, string>;
  /** Credentials; passed as Pulumi secrets so they never reach stack state in plaintext. */
  secretEnv: Record<string, string>;
  /** The stack's own random key of the secretEnv hash the state keeps (provider.ts); a secret. */
  secretEnvHashKey: string;
  /** uid:gid; must not be root. */
  user: string;
  readOnlyRootfs: boolean;
  privileged: boolean;
  capDrop: string[];
  capAdd: string[];
  securityOpt: string[];
  /** Network name (must be a Network of the same stack with internal = true). */
  networkMode: string;
  pidMode?: string;
  ipcMode?: string;
  mounts: MountInput[];
  memoryBytes: number;
  nanoCpus: number;
  pidsLimit: number;
  labels: Record<string, string>;
  /** Port the adapter listens on inside the container. */
  adapterPort: number;
  /** Its readiness path; absent: `/readyz` (our adapter contract). An openai-chat harness: `/healthz`. */
  readyPath?: string;
  /**
   * The session's skills (issue 39), `<pack>/<skill>.md` and its Markdown: the files of the
   * container's own skills volume (`<name>-skills`, session-skills.ts), which is mounted
   * read-only at /skills. Absent when the session has none.
   */
  skills?: { path: string; content: string }[];
}

export interface ContainerOutputs extends ContainerInputs {
  containerId: string;
  /** The digest the engine actually ran (from the image's RepoDigests). */
  resolvedImageDigest: string;
  /** The container's address on the session network. */
  ipAddress: string;
}
