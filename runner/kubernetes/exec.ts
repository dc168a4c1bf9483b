/**
 * Execs into a Kubernetes session pod (the pods/exec WebSocket): the agent's long-lived exec, the
 * short commands a stop and the OOM check run beside it, and how an exec's end is read (its
 * status frame; a SIGKILL checked for the OOM killer).
 *
 * The 1.20 exec protocol (`v4.channel.k8s.io`) has no way to close stdin alone (that came with
 * `v5.channel.k8s.io`, Kubernetes 1.29): stdin stays open for the agent's whole life, and a
 * deliberate stop signals the agent by PID from a second exec.
 */
import { PassThrough, type Readable } from "node:stream";
import { type CoreV1Api, Exec, type KubeConfig, type V1Pod, type V1Status } from "@kubernetes/client-node";
import { AwakeDeadline } from "../../contracts/awake-deadline.ts";
import { CodedError } from "../../contracts/errors.ts";
import {
  AgentPidReader,
  agentExecCommand,
  agentSignalCommand,
  signalUntilEnded,
} from "../engine/agent-exec.ts";
import { type AgentOutput, type AgentProcess, outputSettled } from "../engine/driver.ts";

/** How long an ended agent's exit waits for its last output to be taken. */
const OUTPUT_SETTLE_MS = 2_000;
/** How long an agent's SIGKILL waits for a sign of the OOM killer (pod status, cgroup count). */
const OOM_SETTLE_MS = 3000;
/**
 * The container cgroup's count of OOM kills, read inside the container: cgroup v2 `memory.events`,
 * else cgroup v1 `memory.oom_control` (both have an `oom_kill N` line).
 */
const OOM_KILLS = [
  "/bin/sh",
  "-c",
  "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control",
];

/** The `oom_kill N` count of a cgroup memory.events / memory.oom_control text; undefined when absent. */
export function oomKillsOf(text: string): number | undefined {
  const m = text.match(/^oom_kill (\d+)$/m);
  return m ? Number(m[1]) : undefined;
}
/** `pod/exec` status frame → exit code (V1Status: Success, or NonZeroExitCode with an ExitCode cause). */
export function exitCodeOf(status: V1Status | undefined): number | null {
  if (!status) return null;
  if (status.status === "Success") return 0;
  const cause = status.details?.causes?.find((c) => c.reason === "ExitCode");
  const code = Number(cause?.message);
  return cause && Number.isInteger(code) ? code : null;
}

/**
 * An exec's stdin that never ends: the exec client closes the whole exec stream when stdin ends
 * on a protocol that cannot close stdin alone (v4, Kubernetes < 1.29), cutting the command off.
 * The command reads what it was told to and exits; its end closes the stream.
 */
export function openStdin(): PassThrough {
  return new PassThrough();
}

/** A command running in a pod (PodExec.stream). */
export type ExecStream = {
  stdout: PassThrough;
  /** What it wrote to stderr so far (bounded). */
  stderr: () => string;
  exit: Promise<number | null>;
  /** Ends the exec stream (the kubelet tears the command down). */
  close: () => void;
};

/** The agent's pod and container, found Ready by the driver. */
export type ExecTarget = { containerName: string; pod: V1Pod; podName: string; container: string };

export type AgentExecHooks = {
  /** Whether the workspace still has a Ready pod (tells a failed exec's NOT_FOUND from UNAVAILABLE). */
  isRunning: () => Promise<boolean>;
  /** The agent ended killed by the OOM killer (told before `exited` resolves). */
  onOom: () => void;
  /** The agent's stderr as it comes (the session's logs). */
  onStderr?: (chunk: string) => void;
};

export class PodExec {
  readonly #kc: KubeConfig;
  readonly #core: CoreV1Api;
  readonly #namespace: string;

  constructor(kc: KubeConfig, core: CoreV1Api, namespace: string) {
    this.#kc = kc;
    this.#core = core;
    this.#namespace = namespace;
  }

  /** The agent over a long-lived exec in its pod; stop signals it by PID from a second exec. */
  async startAgent(
    target: ExecTarget,
    command: string[],
    output: AgentOutput,
    hooks: AgentExecHooks,
  ): Promise<AgentProcess> {
    const { containerName, pod, podName, container } = target;
    const stdin = new PassThrough();
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    stderr.setEncoding("utf8");
    stdout.pipe(output);
    // The wrapper's first stderr line is the agent's PID (for stop); the rest is the agent's own log.
    const agentPid = new AgentPidReader();
    stderr.on("data", (chunk: string) => {
      agentPid.feed(chunk);
      hooks.onStderr?.(chunk);
    });
    let status: V1Status | undefined;
    let ws: Awaited<ReturnType<Exec["exec"]>>;
    try {
      ws = await new Exec(this.#kc).exec(
        this.#namespace,
        podName,
        container,
        agentExecCommand(command),
        stdout,
        stderr,
        stdin,
        false,
        (s) => {
          status = s;
        },
      );
    } catch (error) {
      if (!(await hooks.isRunning()))
        throw new CodedError("NOT_FOUND", `workspace ${containerName} has no Ready pod`);
      throw new CodedError("UNAVAILABLE", `exec into ${podName} failed: ${String(error)}`);
    }
    // The exec's handler writes stdout without looking at write()'s answer: the exec WebSocket is
    // paused while stdout is full, so a slow `output` backs up through the kubelet to the agent.
    ws.on("message", () => {
      if (stdout.writableNeedDrain) ws.pause();
    });
    stdout.on("drain", () => ws.resume());
    // The cgroup's OOM kills before this agent: one more when it ends killed means the OOM killer.
    const oomBaseline = this.#oomKills(podName, container);
    const restarts = pod.status?.containerStatuses?.find((c) => c.name === container)?.restartCount ?? 0;
    const exited = new Promise<{ exitCode: number | null }>((resolve) => {
      let closed = false;
      let drained = false;
      let finished = false;
      const finish = () => {
        if (!closed || !drained || finished) return;
        finished = true;
        agentPid.end();
        const exitCode = exitCodeOf(status);
        // The last lines reach `output` before the exit is reported (bounded: it may be throttled).
        const settled = outputSettled(output, OUTPUT_SETTLE_MS);
        if (exitCode !== 137 && exitCode !== null) {
          void settled.then(() => resolve({ exitCode }));
          return;
        }
        // SIGKILL: from the OOM killer, or from someone's kill -9. No exit code at all: the exec
        // stream ended without its status frame, which is how the kubelet sometimes reports an
        // exec'd process the OOM killer took (seen in CI). Either way the cgroup and the pod
        // status tell; settled before the exit is reported, so oomSince answers when asked.
        void Promise.all([this.#killedByOom(podName, container, oomBaseline, restarts), settled]).then(
          ([oom]) => {
            if (oom) hooks.onOom();
            resolve({ exitCode });
          },
        );
      };
      stdout.once("end", () => {
        drained = true;
        finish();
      });
      ws.on("close", () => {
        closed = true;
        // Without a status frame (pod deleted, connection cut) nobody ended stdout.
        if (!stdout.writableEnded) stdout.end();
        finish();
      });
    });
    const ended = (ms: number) =>
      Promise.race([
        exited.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref()),
      ]);
    return {
      send: (line) => ws.readyState === ws.OPEN && stdin.write(`${line}\n`),
      stop: async () => {
        const pid = await Promise.race([agentPid.pid, ended(2000).then(() => undefined)]);
        if (pid)
          await signalUntilEnded(async (signal) => {
            await this.#run(podName, container, agentSignalCommand(signal, pid)).catch(() => undefined);
          }, ended);
        // No PID (the wrapper never spoke) or unkillable: close the socket so `exited` resolves;
        // the kubelet tears the stream down, what the process does then is up to it.
        if (ws.readyState !== ws.CLOSED) ws.close();
        await exited;
      },
      exited,
    };
  }

  /**
   * A command in `container` of the pod with its stdout streamed (backpressure reaches the kubelet)
   * and its stderr kept (the first `maxStderr` characters). `stdin`, when given, is written to the
   * command, which must stop reading on its own: the 1.20 exec protocol cannot close stdin alone.
   * `exit` resolves with the exit code once the stream ends (null without a status frame).
   */
  async stream(
    podName: string,
    container: string,
    command: string[],
    options: { stdin?: Readable; maxStderr?: number } = {},
  ): Promise<ExecStream> {
    let status: V1Status | undefined;
    const stdout = new PassThrough();
    const errors = new PassThrough();
    errors.setEncoding("utf8");
    let stderr = "";
    const maxStderr = options.maxStderr ?? 8_000;
    errors.on("data", (chunk: string) => {
      if (stderr.length < maxStderr) stderr += chunk;
    });
    const ws = await new Exec(this.#kc).exec(
      this.#namespace,
      podName,
      container,
      command,
      stdout,
      errors,
      options.stdin ?? null,
      false,
      (s) => {
        status = s;
      },
    );
    ws.on("message", () => {
      if (stdout.writableNeedDrain) ws.pause();
    });
    stdout.on("drain", () => ws.resume());
    const exit = new Promise<number | null>((resolve) => {
      ws.once("close", () => {
        if (!stdout.writableEnded) stdout.end();
        resolve(exitCodeOf(status));
      });
    });
    return { stdout, stderr: () => stderr, exit, close: () => ws.close() };
  }

  /** A short command in the pod; its exit code and stdout once its status frame arrives. */
  async #capture(
    podName: string,
    container: string,
    command: string[],
  ): Promise<{ exitCode: number | null; stdout: string }> {
    let status: V1Status | undefined;
    let stdout = "";
    const out = new PassThrough();
    out.setEncoding("utf8");
    out.on("data", (chunk: string) => {
      if (stdout.length < 65_536) stdout += chunk;
    });
    const ws = await new Exec(this.#kc).exec(
      this.#namespace,
      podName,
      container,
      command,
      out,
      new PassThrough().resume(),
      null,
      false,
      (s) => {
        status = s;
      },
    );
    await new Promise<void>((r) => ws.once("close", () => r()));
    return { exitCode: exitCodeOf(status), stdout };
  }

  /** A short command in the pod; resolves with its exit code once its status frame arrives. */
  async #run(podName: string, container: string, command: string[]): Promise<number | null> {
    let status: V1Status | undefined;
    const sink = () => new PassThrough().resume();
    const ws = await new Exec(this.#kc).exec(
      this.#namespace,
      podName,
      container,
      command,
      sink(),
      sink(),
      null,
      false,
      (s) => {
        status = s;
      },
    );
    await new Promise<void>((r) => ws.once("close", () => r()));
    return exitCodeOf(status);
  }

  /**
   * Whether an agent that ended by SIGKILL was killed by the OOM killer. Two ways it shows: the
   * container died of it (its status says terminated or restarted, reason OOMKilled: the kernel
   * took the main process), or the container lives on and its cgroup counted one more OOM kill
   * (the kernel took the agent alone; the kubelet reports nothing then). Pod status lags the
   * kernel by a PLEG relist (~1 s), so this looks for up to OOM_SETTLE_MS; only a positive sign
   * counts, and without one the answer is no.
   */
  async #killedByOom(
    podName: string,
    container: string,
    baseline: Promise<number | undefined>,
    restarts: number,
  ): Promise<boolean> {
    const before = await baseline;
    const deadline = new AwakeDeadline(OOM_SETTLE_MS);
    for (;;) {
      const pod = await this.#core
        .readNamespacedPod({ name: podName, namespace: this.#namespace })
        .catch(() => undefined);
      const status = pod?.status?.containerStatuses?.find((c) => c.name === container);
      const ended =
        status?.state?.terminated ??
        (status && status.restartCount > restarts ? status.lastState?.terminated : undefined);
      if (ended) return ended.reason === "OOMKilled";
      if (!pod || pod.metadata?.deletionTimestamp) return false; // the pod went: the watch says why
      const after = await this.#oomKills(podName, container);
      if (before !== undefined && after !== undefined && after > before) return true;
      if (deadline.passed()) return false;
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** The OOM kills the pod container's cgroup counted so far; undefined when it cannot be read. */
  async #oomKills(podName: string, container: string): Promise<number | undefined> {
    try {
      const { exitCode, stdout } = await this.#capture(podName, container, OOM_KILLS);
      return exitCode === 0 ? oomKillsOf(stdout) : undefined;
    } catch {
      return undefined;
    }
  }
}
