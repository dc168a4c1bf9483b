/**
 * The runner's authoritative set of agent sessions: which agent process runs in which workspace
 * and in what state. Deliberate stops end as STOPPED; anything else that ends an agent is
 * ERRORED with the reason (never auto-restarted: recovery is an explicit reload).
 */
import { type AgentFrame, parseAgentLine, type SessionState } from "../contracts/compass.ts";
import { CodedError } from "../contracts/errors.ts";
import type { RunnerSessionReport } from "../contracts/runner-protocol.ts";
import type { AgentProcess, EngineDriver, ExitReason } from "./driver.ts";

export type SessionEvents = {
  frame(sessionId: string, frame: AgentFrame): void;
  state(sessionId: string, state: SessionState, reason?: string): void;
};

type Entry = {
  sessionId: string;
  containerName: string;
  state: SessionState;
  process?: AgentProcess;
  deliberate: boolean;
  /** Set by the engine watcher: why the workload went away. */
  exitReason?: { reason: ExitReason; detail: string };
};

/** The reference runtime's agent; a runtime may declare its own. */
export const DEFAULT_AGENT_COMMAND = ["/bin/node", "/app/reference/agent.ts"];
const READY_TIMEOUT_MS = 15_000;

export class AgentSessions {
  readonly #driver: EngineDriver;
  readonly #events: SessionEvents;
  readonly #entries = new Map<string, Entry>();

  constructor(driver: EngineDriver, events: SessionEvents) {
    this.#driver = driver;
    this.#events = events;
  }

  report(): RunnerSessionReport[] {
    return [...this.#entries.values()]
      .filter((e) => e.state !== "STOPPED")
      .map((e) => ({ session_id: e.sessionId, container_name: e.containerName, state: e.state }));
  }

  #live(containerName: string): Entry | undefined {
    return [...this.#entries.values()].find(
      (e) => e.containerName === containerName && (e.state === "READY" || e.state === "STARTING"),
    );
  }

  #set(entry: Entry, state: SessionState, reason?: string): void {
    entry.state = state;
    this.#events.state(entry.sessionId, state, reason);
  }

  /** Starts the agent; resolves READY once the agent's first frame arrives. */
  async start(
    sessionId: string,
    containerName: string,
    command: string[] = DEFAULT_AGENT_COMMAND,
  ): Promise<SessionState> {
    const live = this.#live(containerName);
    if (live && live.sessionId !== sessionId)
      throw new CodedError(
        "ALREADY_EXISTS",
        `workspace ${containerName} already runs session ${live.sessionId}`,
      );
    if (live) return live.state;
    const entry: Entry = { sessionId, containerName, state: "STARTING", deliberate: false };
    this.#entries.set(sessionId, entry);
    let firstFrame!: () => void;
    const ready = new Promise<void>((r) => {
      firstFrame = r;
    });
    const onLine = (line: string) => {
      const parsed = parseAgentLine(line);
      // A malformed line becomes an error frame; it never crashes the relay.
      const frame: AgentFrame = parsed.ok
        ? parsed.frame
        : {
            protocol: "compass.v1",
            type: "error",
            payload: { message: "malformed agent output", reason: parsed.reason },
          };
      this.#events.frame(sessionId, frame);
      firstFrame();
    };
    let proc: AgentProcess;
    try {
      proc = await this.#driver.startAgent(containerName, command, { onLine });
    } catch (error) {
      this.#entries.delete(sessionId);
      throw error;
    }
    entry.process = proc;
    void proc.exited.then(({ exitCode }) => this.#onAgentExit(entry, exitCode));
    const outcome = await Promise.race([
      ready.then(() => "ready" as const),
      proc.exited.then(() => "exited" as const),
      new Promise<"timeout">((r) => setTimeout(() => r("timeout"), READY_TIMEOUT_MS)),
    ]);
    if (outcome === "ready" && entry.state === "STARTING") {
      this.#set(entry, "READY");
      return "READY";
    }
    if (outcome === "timeout") {
      entry.deliberate = true;
      await proc.stop();
      this.#set(entry, "ERRORED", "AgentNotReady");
      throw new CodedError(
        "DEADLINE_EXCEEDED",
        `agent in ${containerName} sent no frame within ${READY_TIMEOUT_MS} ms`,
      );
    }
    throw new CodedError("FAILED_PRECONDITION", `agent in ${containerName} exited during start`);
  }

  /** Deliberate stop; idempotent, fine for unknown ids. */
  async stop(sessionId: string): Promise<SessionState> {
    const entry = this.#entries.get(sessionId);
    if (!entry || entry.state === "STOPPED" || entry.state === "ERRORED") return entry?.state ?? "STOPPED";
    entry.deliberate = true;
    this.#set(entry, "STOPPING");
    await entry.process?.stop();
    if (entry.state === "STOPPING") this.#set(entry, "STOPPED");
    return "STOPPED";
  }

  send(sessionId: string, line: string): void {
    const entry = this.#entries.get(sessionId);
    if (!entry?.process || entry.state !== "READY")
      throw new CodedError("FAILED_PRECONDITION", `session ${sessionId} is not READY`);
    entry.process.send(line);
  }

  /** Called by the engine watcher: a workload died, was removed, or the engine restarted. */
  workloadExited(containerName: string, reason: ExitReason, detail: string): void {
    for (const entry of this.#entries.values()) {
      if (containerName !== "*" && entry.containerName !== containerName) continue;
      if (entry.deliberate || (entry.state !== "READY" && entry.state !== "STARTING")) continue;
      entry.exitReason = { reason, detail };
      this.#set(entry, "ERRORED", reason);
    }
  }

  /** Forget sessions of a removed workspace. */
  forgetWorkspace(containerName: string): void {
    for (const [id, entry] of this.#entries)
      if (entry.containerName === containerName) this.#entries.delete(id);
  }

  /** Mark sessions of a workspace we are about to scale down or remove as deliberate. */
  async stopWorkspace(containerName: string): Promise<void> {
    for (const entry of [...this.#entries.values()])
      if (entry.containerName === containerName) await this.stop(entry.sessionId);
  }

  async #onAgentExit(entry: Entry, exitCode: number | null): Promise<void> {
    if (entry.deliberate || entry.state === "ERRORED" || entry.state === "STOPPED") return;
    // The engine's events say more than a lost exec exit code: give them a moment to arrive.
    await new Promise((r) => setTimeout(r, 300));
    if ((entry.state as SessionState) === "ERRORED") return; // the watcher got there first
    if (!(await this.#driver.isRunning(entry.containerName))) {
      if (entry.state !== "READY" && entry.state !== "STARTING") return;
      this.#set(entry, "ERRORED", entry.exitReason?.reason ?? "ContainerExited");
      return;
    }
    this.#set(entry, "ERRORED", exitCode === null ? "AgentExited" : `AgentExited(${exitCode})`);
  }
}
