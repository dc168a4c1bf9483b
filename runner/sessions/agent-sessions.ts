/**
 * The runner's authoritative set of agent sessions: which agent process runs in which workspace
 * and in what state. Deliberate stops end as STOPPED; anything else that ends an agent is
 * ERRORED with the reason (never auto-restarted: recovery is an explicit reload).
 */
import { type AgentFrame, parseAgentLine, type SessionState } from "../../contracts/compass.ts";
import { CodedError } from "../../contracts/errors.ts";
import type { Logger } from "../../contracts/log.ts";
import { REFERENCE_AGENT_COMMAND } from "../../contracts/resources.ts";
import type { AgentMode, RunnerSessionReport, SavedRunnerSession } from "../../contracts/runner-protocol.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";
import { AgentStdout, DEFAULT_OUTPUT_LIMITS, type OutputLimits } from "./agent-stdout.ts";
import type { AgentProcess, EngineDriver, ExitReason } from "../engine/driver.ts";
import { needsWorkloadCheck, restoreAction } from "./restore-plan.ts";
import type { SessionLogRing } from "./session-log-ring.ts";

export type SessionEvents = {
  frame(sessionId: string, frame: AgentFrame): void;
  state(sessionId: string, state: SessionState, reason?: string): void;
  /** The set changed (a session added, removed, or in a new state): persist `report()`. */
  changed?(): void;
};

export type AgentSessionsOptions = {
  /** Bounds on each agent's stdout (line length, bytes and frames a second). @default DEFAULT_OUTPUT_LIMITS */
  limits?: OutputLimits;
  /** True while the way to the server is backed up: agents' output is not read meanwhile. */
  congested?: () => boolean;
  log?: Logger;
  /** Where each agent's stderr and ending are kept for the session's logs (issue 42). */
  logs?: SessionLogRing;
};

type Entry = {
  sessionId: string;
  containerName: string;
  state: SessionState;
  /** Why it is in its state (ERRORED: why it ended), as reported to the server. */
  reason?: string;
  /** The argv the agent was started with (the runtime's agent command). */
  command: string[];
  /** `none`: no agent process, the workload is the harness (contracts/runner-protocol.ts AgentMode). */
  mode: AgentMode;
  process?: AgentProcess;
  deliberate: boolean;
  /** The deliberate stop under way, which every further stop of the session waits for. */
  stopping?: Promise<void>;
  /** When this agent process was started (an OOM event after it is its own). */
  startedAt: number;
  /** Set by the engine watcher: why the workload went away. */
  exitReason?: { reason: ExitReason; detail: string };
};

/**
 * An agent started ahead in a warm-pool workspace (runner/sessions/warm-pool.ts) that no session owns
 * yet: its frames are held until a session adopts it, then go out under that session's id.
 */
type WarmAgent = {
  process: AgentProcess;
  command: string[];
  /** Frames before adoption (bounded). */
  held: AgentFrame[];
  deliver?: (frame: AgentFrame) => void;
};
const HELD_FRAMES_MAX = 64;

/** A start that names no command (a server or session file from before runtimes declared one). */
const DEFAULT_AGENT_COMMAND = [...REFERENCE_AGENT_COMMAND];
const READY_TIMEOUT_MS = 15_000;
/** How long an agent whose workload is gone waits for the engine watcher's reason. */
const WATCHER_GRACE_MS = 3_000;

export class AgentSessions {
  readonly #driver: EngineDriver;
  readonly #events: SessionEvents;
  readonly #entries = new Map<string, Entry>();
  /** Pre-started agents by workspace (not in the session set until adopted). */
  readonly #warm = new Map<string, WarmAgent>();
  readonly #options: AgentSessionsOptions;

  constructor(driver: EngineDriver, events: SessionEvents, options: AgentSessionsOptions = {}) {
    this.#driver = driver;
    this.#events = events;
    this.#options = options;
  }

  /** The bounded, budgeted sink of one agent's stdout: frames (malformed ones as error frames) to `frame`. */
  #stdout(containerName: string, frame: (frame: AgentFrame) => void): AgentStdout {
    const stdout = new AgentStdout({
      limits: this.#options.limits ?? DEFAULT_OUTPUT_LIMITS,
      onLine: (line) => frame(frameOf(line)),
      onOverlong: (limitBytes) =>
        frame({
          protocol: "compass.v1",
          type: "error",
          payload: {
            message: "agent output line dropped",
            reason: `line longer than ${limitBytes} bytes`,
          },
        }),
      ...(this.#options.congested ? { congested: this.#options.congested } : {}),
    });
    stdout.on("error", (error) =>
      this.#options.log?.("error", "agent output failed", { containerName, error: String(error) }),
    );
    return stdout;
  }

  /** Where an agent's stderr goes: the session's log ring, when there is one. */
  #stderrOf(containerName: string): ((chunk: string) => void) | undefined {
    const logs = this.#options.logs;
    return logs ? (chunk) => logs.write(containerName, "agent", "stderr", chunk) : undefined;
  }

  report(): RunnerSessionReport[] {
    return [...this.#entries.values()].filter((e) => e.state !== "STOPPED").map(reportOf);
  }

  /** `report()` with each agent's command: what the runner's session file keeps. */
  saved(): SavedRunnerSession[] {
    return [...this.#entries.values()]
      .filter((e) => e.state !== "STOPPED")
      .map((e) => ({ ...reportOf(e), command: e.command, ...(e.mode === "none" ? { mode: e.mode } : {}) }));
  }

  #live(containerName: string): Entry | undefined {
    return [...this.#entries.values()].find(
      (e) => e.containerName === containerName && (e.state === "READY" || e.state === "STARTING"),
    );
  }

  #set(entry: Entry, state: SessionState, reason?: string): void {
    entry.state = state;
    if (reason !== undefined) entry.reason = reason;
    else delete entry.reason;
    this.#events.state(entry.sessionId, state, reason);
    this.#events.changed?.();
  }

  /**
   * After a runner restart: the set it saved before, each session as runner/sessions/restore-plan.ts
   * decides. Agents that were live are started again in their workspaces when the workload still
   * runs (their exec streams died with the previous process; the agent resumes from its workspace
   * state); a live session whose workload stopped meanwhile is kept ERRORED `WorkspaceNotRunning`
   * (the server brings it back up when it should run); ERRORED ones are kept for the server's
   * reload or stop. A session whose agent cannot be started again in a running workload is left
   * out: the server makes it ERRORED `LostByRunner`. Resolves when every start has settled;
   * returns the ones that failed and why. `around` wraps each agent start (the runner thaws a
   * frozen workload for it and freezes it again). @default runs the start as it is
   */
  async restore(
    saved: SavedRunnerSession[],
    around: <T>(containerName: string, start: () => Promise<T>) => Promise<T> = (_, start) => start(),
  ): Promise<{ session_id: string; error: string }[]> {
    const failed: { session_id: string; error: string }[] = [];
    const keepErrored = (s: SavedRunnerSession, reason: string | undefined) => {
      this.#entries.set(s.session_id, {
        sessionId: s.session_id,
        containerName: s.container_name,
        state: "ERRORED",
        command: s.command ?? DEFAULT_AGENT_COMMAND,
        mode: s.mode ?? "exec",
        ...(reason !== undefined ? { reason } : {}),
        deliberate: false,
        startedAt: Date.now(),
      });
    };
    await Promise.all(
      saved.map(async (s) => {
        const running = needsWorkloadCheck(s) ? await this.#driver.isRunning(s.container_name) : undefined;
        const action = restoreAction(s, running);
        switch (action.kind) {
          case "drop":
            return;
          case "keep-errored":
            keepErrored(s, action.reason);
            return;
          case "restart-agent":
            try {
              await around(s.container_name, () =>
                this.start(s.session_id, s.container_name, s.command, s.mode),
              );
            } catch (error) {
              // The workload went between the check and the exec: the same as not running.
              if ((error as { code?: unknown }).code === "NOT_FOUND")
                keepErrored(s, SessionReasons.WorkspaceNotRunning);
              else failed.push({ session_id: s.session_id, error: (error as Error).message });
            }
            return;
          default: {
            const exhaustive: never = action;
            return exhaustive;
          }
        }
      }),
    );
    this.#events.changed?.();
    return failed;
  }

  /**
   * Starts the agent; resolves READY once the agent's first frame arrives. Mode `none` starts
   * nothing: READY when the workload runs (its readiness was probed by the provision), ERRORED
   * when it exits (the engine watcher, `workloadExited`); NOT_FOUND when it does not run.
   */
  async start(
    sessionId: string,
    containerName: string,
    command: string[] = DEFAULT_AGENT_COMMAND,
    mode: AgentMode = "exec",
  ): Promise<SessionState> {
    const live = this.#live(containerName);
    if (live && live.sessionId !== sessionId)
      throw new CodedError(
        "ALREADY_EXISTS",
        `workspace ${containerName} already runs session ${live.sessionId}`,
      );
    if (live) return live.state;
    if (mode === "none") return this.#startWithoutAgent(sessionId, containerName, command);
    const warm = this.#warm.get(containerName);
    if (warm) return this.#adopt(sessionId, containerName, warm);
    const entry: Entry = {
      sessionId,
      containerName,
      state: "STARTING",
      command,
      mode,
      deliberate: false,
      startedAt: Date.now(),
    };
    this.#entries.set(sessionId, entry);
    this.#events.changed?.();
    let firstFrame!: () => void;
    const ready = new Promise<void>((r) => {
      firstFrame = r;
    });
    const stdout = this.#stdout(containerName, (frame) => {
      this.#events.frame(sessionId, frame);
      firstFrame();
    });
    let proc: AgentProcess;
    try {
      proc = await this.#driver.startAgent(containerName, command, stdout, this.#stderrOf(containerName));
    } catch (error) {
      this.#entries.delete(sessionId);
      this.#events.changed?.();
      throw error;
    }
    entry.process = proc;
    void proc.exited.then(({ exitCode }) => {
      this.#options.logs?.note(
        containerName,
        "runner",
        "stderr",
        `agent ${entry.deliberate ? "stopped" : "exited"}${exitCode === null ? "" : ` with code ${exitCode}`}`,
      );
      return this.#onAgentExit(entry, exitCode);
    });
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

  async #startWithoutAgent(
    sessionId: string,
    containerName: string,
    command: string[],
  ): Promise<SessionState> {
    if (!(await this.#driver.isRunning(containerName)))
      throw new CodedError("NOT_FOUND", `workspace ${containerName} is not running`);
    const entry: Entry = {
      sessionId,
      containerName,
      state: "STARTING",
      command,
      mode: "none",
      deliberate: false,
      startedAt: Date.now(),
    };
    this.#entries.set(sessionId, entry);
    this.#set(entry, "READY");
    return "READY";
  }

  /**
   * Starts the agent of a workspace no session owns yet (a warm-pool entry) and resolves once its
   * first frame arrived; the next `start` in that workspace adopts it at once (no exec on the
   * claim path). Throws when it sends nothing in time or exits.
   */
  async prestart(containerName: string, command: string[] = DEFAULT_AGENT_COMMAND): Promise<void> {
    if (this.#warm.has(containerName) || this.#live(containerName)) return;
    let firstFrame!: () => void;
    const ready = new Promise<void>((r) => {
      firstFrame = r;
    });
    const held: AgentFrame[] = [];
    let warm: WarmAgent | undefined;
    const stdout = this.#stdout(containerName, (frame) => {
      if (warm?.deliver) warm.deliver(frame);
      else if (held.length < HELD_FRAMES_MAX) held.push(frame);
      firstFrame();
    });
    const proc = await this.#driver.startAgent(containerName, command, stdout, this.#stderrOf(containerName));
    warm = { process: proc, command, held };
    const started = warm;
    void proc.exited.then(() => {
      if (this.#warm.get(containerName) === started) this.#warm.delete(containerName);
    });
    const outcome = await Promise.race([
      ready.then(() => "ready" as const),
      proc.exited.then(() => "exited" as const),
      new Promise<"timeout">((r) => setTimeout(() => r("timeout"), READY_TIMEOUT_MS)),
    ]);
    if (outcome !== "ready") {
      await proc.stop();
      throw new CodedError(
        outcome === "timeout" ? "DEADLINE_EXCEEDED" : "FAILED_PRECONDITION",
        `pre-started agent in ${containerName} ${outcome === "timeout" ? "sent no frame in time" : "exited"}`,
      );
    }
    this.#warm.set(containerName, started);
  }

  /** True while a pre-started agent waits in the workspace. */
  hasWarm(containerName: string): boolean {
    return this.#warm.has(containerName);
  }

  /** Ends a pre-started agent nobody adopted (its workspace is about to go). */
  async discardWarm(containerName: string): Promise<void> {
    const warm = this.#warm.get(containerName);
    this.#warm.delete(containerName);
    await warm?.process.stop();
  }

  /** A session takes over a pre-started agent: its held frames, then READY. */
  #adopt(sessionId: string, containerName: string, warm: WarmAgent): SessionState {
    this.#warm.delete(containerName);
    const entry: Entry = {
      sessionId,
      containerName,
      state: "STARTING",
      command: warm.command,
      mode: "exec",
      process: warm.process,
      deliberate: false,
      startedAt: Date.now(),
    };
    this.#entries.set(sessionId, entry);
    warm.deliver = (frame) => this.#events.frame(sessionId, frame);
    for (const frame of warm.held.splice(0)) this.#events.frame(sessionId, frame);
    void warm.process.exited.then(({ exitCode }) => this.#onAgentExit(entry, exitCode));
    this.#set(entry, "READY");
    return "READY";
  }

  /** Deliberate stop; idempotent, fine for unknown ids. */
  async stop(sessionId: string): Promise<SessionState> {
    const entry = this.#entries.get(sessionId);
    if (!entry || entry.state === "STOPPED" || entry.state === "ERRORED") return entry?.state ?? "STOPPED";
    // A stop already under way: wait for it; STOPPING is reported once.
    entry.stopping ??= (async () => {
      entry.deliberate = true;
      this.#set(entry, "STOPPING");
      await entry.process?.stop();
      if (entry.state === "STOPPING") this.#set(entry, "STOPPED");
    })();
    await entry.stopping;
    return "STOPPED";
  }

  /** One line to the agent's stdin. NOT_FOUND when this runner does not hold the session. */
  send(sessionId: string, line: string): void {
    const entry = this.#entries.get(sessionId);
    if (!entry) throw new CodedError("NOT_FOUND", `session ${sessionId} is not held by this runner`);
    if (!entry.process || entry.state !== "READY")
      throw new CodedError("FAILED_PRECONDITION", `session ${sessionId} is not READY`);
    entry.process.send(line);
  }

  /** Called by the engine watcher: a workload died, was removed, or the engine restarted. Answers how many live agents it errored. */
  workloadExited(containerName: string, reason: ExitReason, detail: string): number {
    let errored = 0;
    for (const entry of this.#entries.values()) {
      if (containerName !== "*" && entry.containerName !== containerName) continue;
      if (entry.deliberate || (entry.state !== "READY" && entry.state !== "STARTING")) continue;
      entry.exitReason = { reason, detail };
      this.#set(entry, "ERRORED", reason);
      errored++;
    }
    return errored;
  }

  /** Forget sessions of a removed workspace. */
  forgetWorkspace(containerName: string): void {
    for (const [id, entry] of this.#entries)
      if (entry.containerName === containerName) this.#entries.delete(id);
    this.#events.changed?.();
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
      // The workload went: the engine watcher says why (removed, OOM, exit) once its events settle.
      const until = Date.now() + WATCHER_GRACE_MS;
      while (Date.now() < until && (entry.state === "READY" || entry.state === "STARTING"))
        await new Promise((r) => setTimeout(r, 100));
      if (entry.state !== "READY" && entry.state !== "STARTING") return;
      this.#set(entry, "ERRORED", entry.exitReason?.reason ?? "ContainerExited");
      return;
    }
    // The kernel's OOM killer can take the agent alone (the container lives on): the engine's
    // oom event for the container, after this agent started, says so.
    if (this.#driver.oomSince?.(entry.containerName, entry.startedAt)) {
      this.#set(entry, "ERRORED", "OOMKilled");
      return;
    }
    this.#set(entry, "ERRORED", exitCode === null ? "AgentExited" : `AgentExited(${exitCode})`);
  }
}

function reportOf(e: Entry): RunnerSessionReport {
  return {
    session_id: e.sessionId,
    container_name: e.containerName,
    state: e.state,
    ...(e.state === "ERRORED" && e.reason !== undefined ? { reason: e.reason } : {}),
  };
}

/**
 * An agent's stdout line as a frame; a malformed line becomes an error frame (never a crash), and
 * so does a `status` frame: status frames come only from the server.
 */
function frameOf(line: string): AgentFrame {
  const parsed = parseAgentLine(line);
  return parsed.ok
    ? parsed.frame
    : {
        protocol: "compass.v1",
        type: "error",
        payload: { message: "malformed agent output", reason: parsed.reason },
      };
}
