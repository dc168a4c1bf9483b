/**
 * An in-memory engine driver for the scale benchmark only (test/bench/scale-bench.ts): the
 * runner's EngineDriver interface (runner/engine/driver.ts) without an engine. Provisioning and starting
 * return at once; each started agent says it is up with one `log` frame, and then emits compass.v1
 * frames only when asked (`emit`), so the benchmark decides the load.
 */
import { CodedError } from "../../contracts/errors.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import type { AgentOutput, AgentProcess, EngineDriver, ProvisionResult } from "../../runner/engine/driver.ts";

/** The digest part of a digest-pinned image (`repo@sha256:…`). */
function digestOf(image: string): string {
  const at = image.lastIndexOf("@");
  return at < 0 ? image : image.slice(at + 1);
}

/** Milliseconds since the epoch with sub-millisecond precision, comparable across processes of one host. */
export function preciseNow(): number {
  return performance.timeOrigin + performance.now();
}

/** One simulated agent process: stdin lines are echoed back as `message` frames. */
class SimulatedAgent implements AgentProcess {
  readonly exited: Promise<{ exitCode: number | null }>;
  readonly #output: AgentOutput;
  #exit!: (value: { exitCode: number | null }) => void;
  #gone = false;

  constructor(output: AgentOutput) {
    this.#output = output;
    this.exited = new Promise((resolve) => {
      this.#exit = resolve;
    });
    // The first frame is what makes the runner call the session READY.
    setImmediate(() => this.emit("log", { message: "simulated agent up" }));
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
    setImmediate(() => this.emit("message", { echo: line }));
    return true;
  }

  async stop(): Promise<void> {
    if (this.#gone) return;
    this.#gone = true;
    this.#exit({ exitCode: 0 });
  }
}

export class SimulatedDriver implements EngineDriver {
  readonly engine = "docker" as const;
  /** Provisioned workspaces (scale 1) by container name, with the endpoint they were given. */
  readonly #workspaces = new Map<string, string>();
  /** The live agent of each workspace. */
  readonly #agents = new Map<string, SimulatedAgent>();
  #nextPort = 1;

  async provision(
    containerName: string,
    spec: SessionSpec,
    _secrets: { credentials: Record<string, string>; adapterToken: string },
  ): Promise<ProvisionResult> {
    let endpoint = this.#workspaces.get(containerName);
    if (endpoint === undefined) {
      endpoint = `simulated.invalid:${this.#nextPort++}`;
      this.#workspaces.set(containerName, endpoint);
    }
    return { containerName, endpoint, resolvedImageDigest: digestOf(spec.image) };
  }

  async isRunning(containerName: string): Promise<boolean> {
    return this.#workspaces.has(containerName);
  }

  async startAgent(containerName: string, _command: string[], output: AgentOutput): Promise<AgentProcess> {
    if (!this.#workspaces.has(containerName))
      throw new CodedError("NOT_FOUND", `workspace ${containerName} is not running`);
    const agent = new SimulatedAgent(output);
    this.#agents.set(containerName, agent);
    void agent.exited.then(() => {
      if (this.#agents.get(containerName) === agent) this.#agents.delete(containerName);
    });
    return agent;
  }

  async scaleDown(containerName: string): Promise<void> {
    await this.#agents.get(containerName)?.stop();
    this.#workspaces.delete(containerName);
  }

  async remove(containerName: string): Promise<void> {
    await this.scaleDown(containerName);
  }

  async watch(): Promise<() => void> {
    return () => undefined;
  }

  async endpoint(containerName: string): Promise<string> {
    return this.#workspaces.get(containerName) ?? "";
  }

  /** No stacks here: a simulated runner that restarts has no token to read back. */
  async adapterToken(): Promise<string | undefined> {
    return undefined;
  }

  /** Live agents, in start order. */
  get agentCount(): number {
    return this.#agents.size;
  }

  /** The workspaces whose agents `emit` uses, in its round-robin order. */
  emitting(sessions: number): string[] {
    return [...this.#agents.keys()].slice(0, Math.max(1, sessions));
  }

  /**
   * `count` `log` frames, round-robin over the first `sessions` live agents, at `perSecond`
   * (in 10 ms slices). Each payload carries `bench_seq` and `sent_at` (preciseNow()).
   */
  async emit(count: number, sessions: number, perSecond: number): Promise<{ emitted: number; ms: number }> {
    const agents = [...this.#agents.values()].slice(0, Math.max(1, sessions));
    if (agents.length === 0) return { emitted: 0, ms: 0 };
    const started = preciseNow();
    let emitted = 0;
    while (emitted < count) {
      const due = Math.min(count, Math.floor(((preciseNow() - started) / 1000) * perSecond) + 1);
      for (; emitted < due; emitted++)
        agents[emitted % agents.length]?.emit("log", { bench_seq: emitted, sent_at: preciseNow() });
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return { emitted, ms: preciseNow() - started };
  }
}
