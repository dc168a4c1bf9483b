import { hostname } from "node:os";
import { z } from "zod";
import { KubernetesRunnerEnv, type KubernetesRunnerConfig } from "./kubernetes/config.ts";
import { RunnerLabels, RunnerName } from "../contracts/runners.ts";
import { DigestPinnedImage } from "../contracts/session-spec.ts";
import { DEFAULT_OUTPUT_LIMITS, type OutputLimits } from "./sessions/agent-stdout.ts";
import { DEFAULT_UPLOAD_LIMITS, type UploadLimits } from "./relay/workspace-commands.ts";
import { DEFAULT_STARTUP_BOOST, type StartupBoostSettings } from "./docker/startup-boost.ts";

/** A host on this machine: 127.0.0.0/8, ::1 or localhost. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * The link carries credentials and every session's provisions: off this machine only over TLS
 * (`https://` or `wss://`). Plain `http://`/`ws://` to another host only with `allowInsecure`.
 */
export function insecureServerUrl(serverUrl: string): string | undefined {
  const url = new URL(serverUrl);
  if (url.protocol === "https:" || url.protocol === "wss:") return undefined;
  if (url.protocol !== "http:" && url.protocol !== "ws:")
    return `the server URL must be http(s):// or ws(s)://, got ${url.protocol}`;
  if (isLoopbackHost(url.hostname)) return undefined;
  return `the server URL ${url.origin} is not on this machine and not TLS: use https:// or wss:// (AGENT_SESSIONS_RUNNER_ALLOW_INSECURE=true allows plain ws:// in a test bed)`;
}

/**
 * `key=value` pairs as labels: from `--label key=value` (repeated) or
 * `AGENT_SESSIONS_RUNNER_LABELS="zone=a,gpu=true"`. Keys and values are checked by the config schema.
 */
export function parseLabelPairs(pairs: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const pair of pairs.flatMap((p) => p.split(",")).map((p) => p.trim())) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new Error(`a label must be key=value, got "${pair}"`);
    const key = pair.slice(0, eq);
    if (Object.hasOwn(labels, key)) throw new Error(`label ${key} is given twice`);
    labels[key] = pair.slice(eq + 1);
  }
  return labels;
}

/** `AGENT_SESSIONS_RUNNER_LABELS` as labels; a malformed pair is an issue naming the variable. */
const LabelList = z
  .string()
  .transform((text, ctx) => {
    try {
      return parseLabelPairs([text]);
    } catch (error) {
      ctx.issues.push({ code: "custom", message: (error as Error).message, input: text });
      return z.NEVER;
    }
  })
  .pipe(RunnerLabels);

/** `off` turns a switch off; any other value (or none) leaves it on. */
const OnUnlessOff = z
  .string()
  .optional()
  .transform((value) => value !== "off");

/**
 * The runner's environment: one schema, keyed by variable name, defaults and units here, parsed
 * when asked (never at import). The only reader of the runner's settings; docs/configuration.md
 * lists every key (test/unit/settings.test.ts keeps the two in step).
 */
export const RunnerEnv = z
  .object({
    /**
     * The server to dial: `https://`/`wss://`, or plain `http://`/`ws://` on loopback (or with
     * AGENT_SESSIONS_RUNNER_ALLOW_INSECURE). Required: `runner --server URL` sets it; `serve`
     * gives its embedded runner its own address.
     */
    AGENT_SESSIONS_SERVER_URL: z
      .string({ error: "required: the server to dial (runner --server URL)" })
      .url(),
    /**
     * The runner token (registers this runner's name once; the server then issues the runner its
     * own credential, kept in `<data-dir>/runner-credential`), or a credential an admin issued
     * for it (`runners token create`). At least 16 characters; required.
     */
    AGENT_SESSIONS_RUNNER_TOKEN: z.string({ error: "required: the runner token" }).min(16),
    /** `true` allows plain `ws://` to a server that is not on loopback (a test bed). @default false */
    AGENT_SESSIONS_RUNNER_ALLOW_INSECURE: z
      .string()
      .optional()
      .transform((value) => value === "true"),
    /** Its identity on the server (drain and undrain name it); keep it stable across restarts. @default the host name */
    AGENT_SESSIONS_RUNNER_NAME: RunnerName.default(() => hostname()),
    /** `docker` or `kubernetes`. @default docker */
    AGENT_SESSIONS_ENGINE: z.enum(["docker", "kubernetes"]).default("docker"),
    /** Where stacks keep their file:// backend and passphrase, and the runner its credential. Required. */
    AGENT_SESSIONS_RUNNER_DATA_DIR: z.string({ error: "required: the runner's data directory" }).min(1),
    /** How many workspaces placement puts on this runner at most. @default 100 */
    AGENT_SESSIONS_RUNNER_CAPACITY: z.coerce.number().int().positive().default(100),
    /**
     * `k=v,k=v`: what placement selects on (`runnerSelector` of a HarnessSession,
     * `runner_selector` of an RPC). @default none
     */
    AGENT_SESSIONS_RUNNER_LABELS: LabelList.default({}),
    /** The Docker engine's address (Docker engine only). @default unix:///var/run/docker.sock */
    DOCKER_HOST: z.string().default("unix:///var/run/docker.sock"),
    /**
     * The kubeconfig of the Kubernetes engine, also handed to the stacks' provider. @default unset:
     * ~/.kube/config, else the pod's service account
     */
    KUBECONFIG: z.string().optional(),
    ...KubernetesRunnerEnv.shape,
    /**
     * A digest-pinned image with git and /bin/sh that seeds workspaces from repositories and diffs
     * them (runner/docker/repo-seed.ts; on Kubernetes each session pod's `workspace` sidecar).
     * @default unset: a repository workstream fails to provision with FAILED_PRECONDITION
     */
    AGENT_SESSIONS_GIT_IMAGE: DigestPinnedImage.optional(),
    /**
     * `off`: stop and resume (and heal, on Kubernetes) take the full stack path instead of acting
     * on the engine at once and recording the stack afterwards. @default on
     */
    AGENT_SESSIONS_FAST_PATH: OnUnlessOff,
    /**
     * `host:port` where this runner serves the model gateway (runner/gateway/), an address on this
     * machine that its sessions reach: the only way a session reaches its model, with a token of
     * its own instead of the Agent's credentials. Port 0: a free port, kept across restarts (in
     * `<data-dir>/gateway.json`). @default Docker: the Docker bridge's gateway address, port 0;
     * Kubernetes: unset, and sessions of an Agent with a model fail to provision, saying so
     */
    AGENT_SESSIONS_GATEWAY_ADDRESS: z
      .string()
      .regex(/^(\d{1,3}\.){3}\d{1,3}:\d{1,5}$/, "must be an IPv4 host:port, e.g. 10.213.0.1:0")
      .optional(),
    /** `off`: a first create takes the full stack path instead of the fast one. @default on */
    AGENT_SESSIONS_FAST_CREATE: OnUnlessOff,
    /**
     * How `serve`'s embedded runner runs and reaches its server: `worker`, on a thread of its
     * own linked by a port (contracts/runner-port-channel.ts); `in-process` (or `channel`), on
     * the server's thread linked in memory (contracts/runner-channel.ts); `websocket`, on the
     * server's thread over a loopback WebSocket. The last two to compare. @default worker
     */
    AGENT_SESSIONS_EMBEDDED_LINK: z
      .enum(["worker", "in-process", "channel", "websocket"], {
        error: "must be worker, in-process or websocket",
      })
      .default("worker")
      // `channel`: the old name of in-process, still taken.
      .transform((value): EmbeddedLink => (value === "channel" ? "in-process" : value)),
    /** Longest line of an agent's stdout, in bytes; a longer one is dropped with an error frame. @default 262144 */
    AGENT_SESSIONS_AGENT_LINE_MAX_BYTES: z.coerce
      .number()
      .int()
      .min(1024)
      .max(4 * 1024 * 1024)
      .default(DEFAULT_OUTPUT_LIMITS.maxLineBytes),
    /** Bytes a second of one session's agent output; more is throttled. @default 4194304 */
    AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_OUTPUT_LIMITS.bytesPerSecond),
    /** Frames a second of one session's agent output; more is throttled. @default 2000 */
    AGENT_SESSIONS_AGENT_FRAMES_PER_SECOND: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_OUTPUT_LIMITS.framesPerSecond),
    /** Uploads staged on this runner's disk at once (each up to the server's file limit); one more is RESOURCE_EXHAUSTED. @default 16 */
    AGENT_SESSIONS_RUNNER_UPLOADS_MAX: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_UPLOAD_LIMITS.uploadsMax),
    /** Uploads staged at once into one workspace; one more is RESOURCE_EXHAUSTED. @default 4 */
    AGENT_SESSIONS_RUNNER_UPLOADS_PER_WORKSPACE_MAX: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_UPLOAD_LIMITS.uploadsPerWorkspaceMax),
    /** A staged upload no piece came for this long, in ms, is dropped with its file. @default 60000 */
    AGENT_SESSIONS_RUNNER_UPLOAD_IDLE_MS: z.coerce
      .number()
      .int()
      .min(100)
      .default(DEFAULT_UPLOAD_LIMITS.uploadIdleMs),
    /**
     * Bytes of memory this runner's paused sessions may hold (the engine's own count); past it the
     * least recently paused are stopped (reason Evicted), never a running one. 0: no budget. @default 0
     */
    AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES: z.coerce.number().int().nonnegative().default(0),
    /**
     * Cores a session container gets while it starts (a create or a resume, Docker engine), never
     * above the engine's; back to its declared limit at its harness's first answer, or after
     * AGENT_SESSIONS_STARTUP_CPU_BOOST_MS. `0` or `off`: no boost. @default 2
     */
    AGENT_SESSIONS_STARTUP_CPU_BOOST: z
      .string()
      .optional()
      .transform((value, ctx) => {
        if (value === undefined) return DEFAULT_STARTUP_BOOST.cores;
        if (value === "off") return 0;
        const cores = Number(value);
        if (!Number.isFinite(cores) || cores < 0 || cores > 1024) {
          ctx.issues.push({
            code: "custom",
            message: `must be a number of cores (e.g. 2 or 1.5), 0 or off, got "${value}"`,
            input: value,
          });
          return z.NEVER;
        }
        return cores;
      }),
    /** The longest a startup CPU boost lasts, in ms (0: no boost). @default 10000 */
    AGENT_SESSIONS_STARTUP_CPU_BOOST_MS: z.coerce
      .number()
      .int()
      .nonnegative()
      .max(600_000)
      .default(DEFAULT_STARTUP_BOOST.maxMs),
  })
  .superRefine((env, ctx) => {
    const insecure = env.AGENT_SESSIONS_RUNNER_ALLOW_INSECURE
      ? undefined
      : insecureServerUrl(env.AGENT_SESSIONS_SERVER_URL);
    if (insecure) ctx.addIssue({ code: "custom", path: ["AGENT_SESSIONS_SERVER_URL"], message: insecure });
  });

/** AGENT_SESSIONS_EMBEDDED_LINK's choices. */
export type EmbeddedLink = "worker" | "in-process" | "websocket";

/** A runner variable's name. */
export type RunnerVariable = keyof z.input<typeof RunnerEnv>;

/** Resolved runner options: what `startRunner` and `Runner` take. */
export type RunnerConfig = {
  /** AGENT_SESSIONS_SERVER_URL */
  serverUrl: string;
  /** AGENT_SESSIONS_RUNNER_TOKEN */
  token: string;
  /** AGENT_SESSIONS_RUNNER_ALLOW_INSECURE */
  allowInsecure: boolean;
  /** AGENT_SESSIONS_RUNNER_NAME */
  name: string;
  /** AGENT_SESSIONS_ENGINE */
  engine: "docker" | "kubernetes";
  /** AGENT_SESSIONS_RUNNER_DATA_DIR */
  dataDir: string;
  /** AGENT_SESSIONS_RUNNER_CAPACITY */
  capacity: number;
  /** AGENT_SESSIONS_RUNNER_LABELS */
  labels: RunnerLabels;
  /** DOCKER_HOST */
  dockerHost: string;
  /** KUBECONFIG */
  kubeconfig: string | undefined;
  /** AGENT_SESSIONS_KUBERNETES_NAMESPACE, AGENT_SESSIONS_RUNNER_{POD_LABELS,NAMESPACE_LABELS,CIDR} */
  kubernetes: KubernetesRunnerConfig;
  /** AGENT_SESSIONS_AGENT_{LINE_MAX_BYTES,OUTPUT_BYTES_PER_SECOND,FRAMES_PER_SECOND}: bounds on each agent's stdout. */
  agentOutput: OutputLimits;
  /** AGENT_SESSIONS_RUNNER_{UPLOADS_MAX,UPLOADS_PER_WORKSPACE_MAX,UPLOAD_IDLE_MS}: bounds on staged uploads. */
  uploads: UploadLimits;
  /** AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES: 0 is no budget. */
  pausedMemoryMaxBytes: number;
  /** AGENT_SESSIONS_STARTUP_CPU_BOOST{,_MS}: cores 0 or maxMs 0 is no boost (Docker engine). */
  startupBoost: StartupBoostSettings;
  /** AGENT_SESSIONS_GIT_IMAGE */
  gitImage: string | undefined;
  /** AGENT_SESSIONS_FAST_PATH */
  fastPath: boolean;
  /** AGENT_SESSIONS_FAST_CREATE */
  fastCreate: boolean;
  /** AGENT_SESSIONS_EMBEDDED_LINK */
  embeddedLink: EmbeddedLink;
  /** AGENT_SESSIONS_GATEWAY_ADDRESS: host unset until the engine's default is found (runner/main.ts). */
  gateway: { host: string | undefined; port: number };
};

/**
 * Parse the runner's configuration. An empty variable counts as unset (as on the server);
 * `fallback` gives values for variables the source leaves unset (`serve` and `runner`: the test
 * bed's git image). Throws the schema's ZodError, whose issues name the variables.
 */
export function parseRunnerConfig(
  source: Record<string, string | undefined> = process.env,
  fallback: Partial<Record<RunnerVariable, string | undefined>> = {},
): RunnerConfig {
  const env = RunnerEnv.parse({ ...given(fallback), ...given(source) });
  return {
    serverUrl: env.AGENT_SESSIONS_SERVER_URL,
    token: env.AGENT_SESSIONS_RUNNER_TOKEN,
    allowInsecure: env.AGENT_SESSIONS_RUNNER_ALLOW_INSECURE,
    name: env.AGENT_SESSIONS_RUNNER_NAME,
    engine: env.AGENT_SESSIONS_ENGINE,
    dataDir: env.AGENT_SESSIONS_RUNNER_DATA_DIR,
    capacity: env.AGENT_SESSIONS_RUNNER_CAPACITY,
    labels: env.AGENT_SESSIONS_RUNNER_LABELS,
    dockerHost: env.DOCKER_HOST,
    kubeconfig: env.KUBECONFIG,
    kubernetes: {
      namespace: env.AGENT_SESSIONS_KUBERNETES_NAMESPACE,
      ...(env.AGENT_SESSIONS_RUNNER_POD_LABELS ? { podLabels: env.AGENT_SESSIONS_RUNNER_POD_LABELS } : {}),
      ...(env.AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS
        ? { namespaceLabels: env.AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS }
        : {}),
      ...(env.AGENT_SESSIONS_RUNNER_CIDR ? { runnerCidr: env.AGENT_SESSIONS_RUNNER_CIDR } : {}),
    },
    agentOutput: {
      maxLineBytes: env.AGENT_SESSIONS_AGENT_LINE_MAX_BYTES,
      bytesPerSecond: env.AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND,
      framesPerSecond: env.AGENT_SESSIONS_AGENT_FRAMES_PER_SECOND,
    },
    uploads: {
      uploadsMax: env.AGENT_SESSIONS_RUNNER_UPLOADS_MAX,
      uploadsPerWorkspaceMax: env.AGENT_SESSIONS_RUNNER_UPLOADS_PER_WORKSPACE_MAX,
      uploadIdleMs: env.AGENT_SESSIONS_RUNNER_UPLOAD_IDLE_MS,
    },
    pausedMemoryMaxBytes: env.AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES,
    startupBoost: {
      cores: env.AGENT_SESSIONS_STARTUP_CPU_BOOST,
      maxMs: env.AGENT_SESSIONS_STARTUP_CPU_BOOST_MS,
    },
    gitImage: env.AGENT_SESSIONS_GIT_IMAGE,
    fastPath: env.AGENT_SESSIONS_FAST_PATH,
    fastCreate: env.AGENT_SESSIONS_FAST_CREATE,
    embeddedLink: env.AGENT_SESSIONS_EMBEDDED_LINK,
    gateway: gatewayAddress(env.AGENT_SESSIONS_GATEWAY_ADDRESS),
  };
}

function gatewayAddress(address: string | undefined): RunnerConfig["gateway"] {
  if (address === undefined) return { host: undefined, port: 0 };
  const colon = address.lastIndexOf(":");
  const port = Number(address.slice(colon + 1));
  if (port > 65535) throw new Error(`AGENT_SESSIONS_GATEWAY_ADDRESS: port ${port} is not a port`);
  return { host: address.slice(0, colon), port };
}

/** The entries that are set: an empty variable is unset. */
function given(source: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(source).filter(
      (entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== "",
    ),
  );
}
