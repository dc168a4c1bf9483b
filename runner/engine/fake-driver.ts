/**
 * One engine in memory behind the driver interface (runner/engine/driver.ts), for tests and the
 * scale benchmark only (test/bench/simulated-driver.ts); runner/main.ts never makes it.
 *
 * A provision makes its workload run; a started agent says it is up with one `log` frame (the
 * frame that makes the runner call a session READY) and ends when stopped, or when a test ends it
 * as a crash would (`FakeAgent.exit`). Scaling down or removing a workload ends its agent, as the
 * engine would. What outlives one runner process (the running workloads, the stacks' adapter
 * tokens) is a `FakeMachine` that several drivers may share.
 */
import type { SessionMetrics } from "../../contracts/session-metrics.ts";
import { CodedError } from "../../contracts/errors.ts";
import { type SessionSpec, type SnapshotStorage, workloadName } from "../../contracts/session-spec.ts";
import type {
  AgentOutput,
  AgentProcess,
  EngineDriver,
  ProvisionResult,
  SessionSnapshots,
  WorkspaceUpload,
} from "./driver.ts";
import type { Secrets } from "./fast-path.ts";

/** What survives a runner process: the engine's running workloads and the stacks' adapter tokens. */
export type FakeMachine = {
  running: Set<string>;
  stackTokens: Map<string, string>;
  /** Running workloads frozen by `pause` (a subset of `running`). */
  paused: Set<string>;
  /** Memory each workload uses, as the engine would count it; absent: 64 MiB. */
  memory: Map<string, number>;
  /** Volumes by name (`<workload>-workspace`, a snapshot's storage): file path → content. */
  volumes: Map<string, Map<string, string>>;
};

export function fakeMachine(): FakeMachine {
  return {
    running: new Set(),
    stackTokens: new Map(),
    paused: new Set(),
    memory: new Map(),
    volumes: new Map(),
  };
}

/**
 * Snapshots in memory: a volume is a map of files; a snapshot's "tar" is their JSON. `hold`, when
 * set, is awaited by each take before it copies (a test sees what waits meanwhile).
 */
export class FakeSnapshots implements SessionSnapshots {
  readonly #machine: FakeMachine;
  /** Every take asked for, in order (the workspace's name). */
  readonly takes: string[] = [];
  hold: Promise<void> | undefined;

  constructor(machine: FakeMachine) {
    this.#machine = machine;
  }

  #volume(name: string, what: string): Map<string, string> {
    const v = this.#machine.volumes.get(name);
    if (!v) throw new CodedError("NOT_FOUND", `${what} ${name} not found`);
    return v;
  }

  #create(target: SnapshotStorage, files: Map<string, string>): { sizeBytes: number } {
    if (this.#machine.volumes.has(target.storage))
      throw new CodedError("ALREADY_EXISTS", `the storage ${target.storage} exists`);
    this.#machine.volumes.set(target.storage, files);
    let sizeBytes = 0;
    for (const content of files.values()) sizeBytes += Buffer.byteLength(content);
    return { sizeBytes };
  }

  async take(containerName: string, target: SnapshotStorage): Promise<{ sizeBytes: number }> {
    this.takes.push(containerName);
    await this.hold;
    const source = this.#volume(`${containerName}-workspace`, "volume");
    return this.#create(target, new Map(source));
  }

  async remove(target: SnapshotStorage): Promise<boolean> {
    return this.#machine.volumes.delete(target.storage);
  }

  async read(target: SnapshotStorage, maxBytes: number): Promise<AsyncIterable<Buffer>> {
    const tar = Buffer.from(
      JSON.stringify(Object.fromEntries(this.#volume(target.storage, "snapshot storage"))),
    );
    if (tar.length > maxBytes) throw new CodedError("RESOURCE_EXHAUSTED", `exceeds ${maxBytes} bytes`);
    return (async function* () {
      yield tar;
    })();
  }

  async write(target: SnapshotStorage, upload: WorkspaceUpload): Promise<{ sizeBytes: number }> {
    const chunks: Buffer[] = [];
    for await (const chunk of upload.open()) chunks.push(chunk);
    const files = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, string>;
    return this.#create(target, new Map(Object.entries(files)));
  }

  async restore(containerName: string, source: SnapshotStorage): Promise<void> {
    if (this.#machine.running.has(containerName))
      throw new CodedError("FAILED_PRECONDITION", `workspace ${containerName} is running`);
    const files = this.#volume(source.storage, "snapshot storage");
    this.#volume(`${containerName}-workspace`, "volume");
    this.#machine.volumes.set(`${containerName}-workspace`, new Map(files));
  }
}

export type FakeDriverOptions = {
  /** Shared by the drivers of successive runner processes on one machine. @default a new one */
  machine?: FakeMachine;
  /** The adapter address a running workload answers at. @default "10.0.0.1:8080" */
  endpoint?: (containerName: string) => string;
  /** Agents answer each line sent to them with a `message` frame `{echo: line}`. @default false */
  echo?: boolean;
  /**
   * Keeps every provision, start, line sent and removal for a test to assert on; a benchmark of
   * thousands of sessions turns it off so memory stays what the runner itself holds. @default true
   */
  record?: boolean;
};

/** The digest part of a digest-pinned image (`repo@sha256:…`). */
function digestOf(image: string): string {
  const at = image.lastIndexOf("@");
  return at < 0 ? image : image.slice(at + 1);
}

/** One agent process: it writes what it is told to its stdout, and ends once. */
export class FakeAgent implements AgentProcess {
  readonly exited: Promise<{ exitCode: number | null }>;
  readonly #output: AgentOutput;
  readonly #onSend: (line: string) => void;
  readonly #echo: boolean;
  #end!: (value: { exitCode: number | null }) => void;
  #gone = false;

  constructor(output: AgentOutput, onSend: (line: string) => void, echo: boolean) {
    this.#output = output;
    this.#onSend = onSend;
    this.#echo = echo;
    this.exited = new Promise((resolve) => {
      this.#end = resolve;
    });
    setImmediate(() => this.emit("log", { message: "agent started" }));
  }

  get running(): boolean {
    return !this.#gone;
  }

  /** One compass.v1 line on the agent's stdout. */
  emit(type: "log" | "message", payload: Record<string, unknown>): void {
    if (this.#gone) return;
    this.#output.write(`${JSON.stringify({ protocol: "compass.v1", type, payload })}\n`);
  }

  send(line: string): boolean {
    if (this.#gone) return false;
    this.#onSend(line);
    if (this.#echo) setImmediate(() => this.emit("message", { echo: line }));
    return true;
  }

  async stop(): Promise<void> {
    this.exit(0);
  }

  /** Ends the agent without being asked (a crash: 1, an OOM kill: 137). */
  exit(exitCode: number | null): void {
    if (this.#gone) return;
    this.#gone = true;
    this.#end({ exitCode });
  }
}

export class FakeDriver implements EngineDriver {
  readonly engine = "docker" as const;
  readonly machine: FakeMachine;
  /** Every provision asked for, failed ones included, in order. */
  readonly provisions: { containerName: string; spec: SessionSpec; secrets: Secrets }[] = [];
  /** Every agent started, in order. */
  readonly starts: { containerName: string; command: string[]; output: AgentOutput }[] = [];
  /** Every line sent to an agent, in order. */
  readonly sent: string[] = [];
  /** Every workload removed, in order. */
  readonly removed: string[] = [];
  /** The live agent of each workload. */
  readonly agents = new Map<string, FakeAgent>();
  readonly snapshots: FakeSnapshots;
  /** The snapshot storage each volume was seeded from (a Docker volume's label). */
  readonly #seededFrom = new Map<string, string>();
  /** Workloads whose agent exec fails (INTERNAL), as an engine refusing the exec would. */
  readonly failingExec = new Set<string>();
  /** How many of the next provisions fail after half making their workload (it is left running). */
  failProvisions = 0;
  readonly #endpoint: (containerName: string) => string;
  readonly #echo: boolean;
  readonly #record: boolean;

  constructor(options: FakeDriverOptions = {}) {
    this.machine = options.machine ?? fakeMachine();
    this.snapshots = new FakeSnapshots(this.machine);
    this.#endpoint = options.endpoint ?? (() => "10.0.0.1:8080");
    this.#echo = options.echo ?? false;
    this.#record = options.record ?? true;
  }

  async provision(containerName: string, spec: SessionSpec, secrets: Secrets): Promise<ProvisionResult> {
    if (this.#record) this.provisions.push({ containerName, spec, secrets });
    if (workloadName(spec.namespace, spec.name) !== containerName)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `container_name ${containerName} does not match the session spec`,
      );
    // A fork's volume starts as a copy of its snapshot, once: only when it does not exist yet.
    const volume = `${containerName}-workspace`;
    const seed = spec.seedSnapshot;
    if (!this.machine.volumes.has(volume)) {
      const files = seed ? this.machine.volumes.get(seed.storage) : new Map<string, string>();
      if (!files) throw new CodedError("NOT_FOUND", `snapshot storage ${seed?.storage} not found`);
      this.machine.volumes.set(volume, new Map(files));
      if (seed) this.#seededFrom.set(volume, seed.storage);
    }
    // Said again while the seed is still sent (the server may not have taken the first answer).
    const seededSnapshot = seed && this.#seededFrom.get(volume) === seed.storage ? seed.storage : undefined;
    this.machine.running.add(containerName);
    if (this.failProvisions > 0) {
      this.failProvisions -= 1;
      throw new Error("up failed");
    }
    this.machine.stackTokens.set(containerName, secrets.adapterToken);
    return {
      containerName,
      endpoint: this.#endpoint(containerName),
      resolvedImageDigest: digestOf(spec.image),
      ...(seededSnapshot ? { seededSnapshot } : {}),
    };
  }

  async isRunning(containerName: string): Promise<boolean> {
    return this.machine.running.has(containerName);
  }

  async startAgent(containerName: string, command: string[], output: AgentOutput): Promise<AgentProcess> {
    if (!(await this.isRunning(containerName)))
      throw new CodedError("NOT_FOUND", `workspace ${containerName} is not running`);
    if (this.machine.paused.has(containerName))
      throw new CodedError("FAILED_PRECONDITION", `container ${containerName} is paused`);
    if (this.failingExec.has(containerName))
      throw new CodedError("INTERNAL", `exec failed in ${containerName}`);
    if (this.#record) this.starts.push({ containerName, command, output });
    const onSend = this.#record ? (line: string) => void this.sent.push(line) : () => undefined;
    const agent = new FakeAgent(output, onSend, this.#echo);
    this.agents.set(containerName, agent);
    void agent.exited.then(() => {
      if (this.agents.get(containerName) === agent) this.agents.delete(containerName);
    });
    return agent;
  }

  async scaleDown(containerName: string): Promise<void> {
    // Docker refuses to stop a paused container: the runner must have thawed it first.
    if (this.machine.paused.has(containerName))
      throw new CodedError("FAILED_PRECONDITION", `container ${containerName} is paused`);
    this.agents.get(containerName)?.exit(null);
    this.machine.running.delete(containerName);
  }

  async pause(containerName: string): Promise<void> {
    if (!this.machine.running.has(containerName))
      throw new CodedError("FAILED_PRECONDITION", `workspace ${containerName} is not running`);
    this.machine.paused.add(containerName);
  }

  async unpause(containerName: string): Promise<void> {
    this.machine.paused.delete(containerName);
  }

  async isPaused(containerName: string): Promise<boolean> {
    return this.machine.paused.has(containerName);
  }

  async metrics(containerName: string): Promise<SessionMetrics> {
    if (!this.machine.running.has(containerName))
      throw new CodedError("FAILED_PRECONDITION", `workspace ${containerName} has no running container`);
    const now = new Date().toISOString();
    return {
      since: now,
      sampledAt: now,
      cpu: { cores: 0.25, limitCores: 0.5, windowMs: 1000 },
      memory: { bytes: (await this.memoryBytes(containerName)) ?? 0, limitBytes: 512 * 1024 * 1024 },
      network: { rxBytes: 1000, txBytes: 2000 },
      volume: { usedBytes: 4096 },
    };
  }

  async memoryBytes(containerName: string): Promise<number | undefined> {
    if (!this.machine.running.has(containerName)) return undefined;
    return this.machine.memory.get(containerName) ?? 64 * 1024 * 1024;
  }

  async remove(containerName: string): Promise<void> {
    await this.scaleDown(containerName);
    this.machine.stackTokens.delete(containerName);
    this.machine.volumes.delete(`${containerName}-workspace`);
    if (this.#record) this.removed.push(containerName);
  }

  async watch(): Promise<() => void> {
    return () => undefined;
  }

  async endpoint(containerName: string): Promise<string> {
    return this.machine.running.has(containerName) ? this.#endpoint(containerName) : "";
  }

  async adapterToken(containerName: string): Promise<string | undefined> {
    return this.machine.stackTokens.get(containerName);
  }
}
