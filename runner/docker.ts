/**
 * The Docker driver: provisioning through the session stack (stacks/), the agent over a
 * long-lived hijacked exec stream, and exits observed through engine events (an exec stream cut
 * by `docker rm -f` loses its exit code, TESTBED.md: the events say what happened).
 */
import { PassThrough } from "node:stream";
import type Docker from "dockerode";
import { CodedError } from "../contracts/errors.ts";
import { Labels, type SessionSpec, workloadName } from "../contracts/session-spec.ts";
import type { StackManager } from "../stacks/index.ts";
import { runOnce } from "./docker-one-shot.ts";
import { DockerWorkspaceFiles } from "./docker-workspace.ts";
import { outputSettled } from "./driver.ts";
import type {
  AgentOutput,
  AgentProcess,
  EngineDriver,
  ExitReason,
  ProvisionResult,
  RunOnceCommand,
  RunOnceOutcome,
} from "./driver.ts";

type Placement = { namespace: string; name: string };

/** How long a container's `die` waits for its `destroy` (a removal) before it counts as an exit. */
const DIE_SETTLE_MS = 500;
/** How long an ended agent's exit waits for its last output to be taken. */
const OUTPUT_SETTLE_MS = 2_000;

export class DockerDriver implements EngineDriver {
  readonly engine = "docker" as const;
  readonly #docker: Docker;
  readonly #stacks: StackManager;
  readonly #placements = new Map<string, Placement>();
  /** When the engine last reported an `oom` event per container (the watcher records it). */
  readonly #ooms = new Map<string, number>();
  /**
   * The adapter's address per workspace, from the last `up` at scale 1: relayed requests must not
   * pay a Pulumi CLI round trip (`stack output`) each. Dropped when the workload goes.
   */
  readonly #endpoints = new Map<string, string>();

  readonly workspace: DockerWorkspaceFiles;

  constructor(docker: Docker, stacks: StackManager) {
    this.#docker = docker;
    this.workspace = new DockerWorkspaceFiles(docker);
    this.#stacks = stacks;
  }

  async provision(
    containerName: string,
    spec: SessionSpec,
    secrets: { credentials: Record<string, string>; adapterToken: string },
  ): Promise<ProvisionResult> {
    if (workloadName(spec.namespace, spec.name) !== containerName) {
      throw new CodedError(
        "INVALID_ARGUMENT",
        `container_name ${containerName} does not match the session spec`,
      );
    }
    this.#placements.set(containerName, { namespace: spec.namespace, name: spec.name });
    await this.#forgetLostContainer(containerName, spec);
    this.#endpoints.delete(containerName);
    const outputs = await this.#stacks.up({ ...spec, replicas: 1 }, secrets);
    if (outputs.endpoint) this.#endpoints.set(containerName, outputs.endpoint);
    return { containerName, endpoint: outputs.endpoint, resolvedImageDigest: outputs.resolvedImageDigest };
  }

  /**
   * A re-provision replaces a container that was removed outside or is no longer running (it
   * exited, was OOM-killed): `up` alone trusts the stack's state and would change nothing. An
   * exited container is removed, then `refresh` drops what is gone from the state, so `up`
   * creates it again under its name (the volume, untouched, keeps the workspace).
   */
  async #forgetLostContainer(containerName: string, spec: SessionSpec): Promise<void> {
    let state: { Running: boolean } | undefined;
    try {
      state = (await this.#docker.getContainer(containerName).inspect()).State;
    } catch {
      state = undefined; // gone
    }
    if (state?.Running) return;
    if (!(await this.#stacks.exists(spec.namespace, spec.name))) return; // a first provision
    if (state) await this.#docker.getContainer(containerName).remove({ force: true });
    await this.#stacks.refresh(spec.namespace, spec.name);
  }

  async #placement(containerName: string): Promise<Placement | undefined> {
    const known = this.#placements.get(containerName);
    if (known) return known;
    // After a runner restart: find the session by the labels on its volume.
    const { Volumes } = await this.#docker.listVolumes({
      filters: JSON.stringify({ label: [`${Labels.managedBy}=agent-sessions`] }),
    });
    for (const v of Volumes ?? []) {
      const ns = v.Labels?.[Labels.namespace];
      const name = v.Labels?.[Labels.session];
      if (ns && name && workloadName(ns, name) === containerName) {
        const p = { namespace: ns, name };
        this.#placements.set(containerName, p);
        return p;
      }
    }
    return undefined;
  }

  oomSince(containerName: string, sinceMs: number): boolean {
    return (this.#ooms.get(containerName) ?? Number.NEGATIVE_INFINITY) >= sinceMs;
  }

  async isRunning(containerName: string): Promise<boolean> {
    try {
      return (await this.#docker.getContainer(containerName).inspect()).State.Running;
    } catch {
      return false;
    }
  }

  async endpoint(containerName: string): Promise<string> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    const cached = this.#endpoints.get(containerName);
    if (cached) return cached;
    // After a runner restart: the last `up`'s outputs, kept until the workload goes.
    const { endpoint } = await this.#stacks.outputs(p.namespace, p.name);
    if (endpoint) this.#endpoints.set(containerName, endpoint);
    return endpoint;
  }

  async adapterToken(containerName: string): Promise<string | undefined> {
    const p = await this.#placement(containerName);
    if (!p) return undefined;
    return this.#stacks.adapterToken(p.namespace, p.name).catch((e: unknown) => {
      if ((e as { code?: string }).code === "NOT_FOUND") return undefined;
      throw e;
    });
  }

  async startAgent(containerName: string, command: string[], output: AgentOutput): Promise<AgentProcess> {
    const container = this.#docker.getContainer(containerName);
    let running = false;
    try {
      running = (await container.inspect()).State.Running;
    } catch {
      running = false;
    }
    if (!running) throw new CodedError("NOT_FOUND", `workspace ${containerName} has no running container`);
    const exec = await container.exec({
      // The shell reports the agent's PID in the container's PID namespace, then becomes the
      // agent: a stop that closing stdin does not finish can signal exactly that process.
      Cmd: ["/bin/sh", "-c", 'echo "agent-pid $$" >&2; exec "$@"', "agent", ...command],
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    const stream = await exec.start({ hijack: true, stdin: true });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    this.#docker.modem.demuxStream(stream, stdout, stderr);
    // demuxStream writes without looking at write()'s answer: the exec stream itself is held
    // while stdout is full, so a slow `output` backs up through dockerd to the agent's writes.
    stream.on("data", () => {
      if (stdout.writableNeedDrain) stream.pause();
    });
    stdout.on("drain", () => stream.resume());
    stdout.pipe(output);
    // The agent's stderr is its own log; frames come from stdout only. Its first line is our PID note.
    let agentPid: string | undefined;
    stderr.setEncoding("utf8");
    stderr.on("data", (chunk: string) => {
      agentPid ??= chunk.match(/agent-pid (\d+)/)?.[1];
    });
    const exited = new Promise<{ exitCode: number | null }>((resolve) => {
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        stdout.end();
        // The last lines reach `output` before the exit is reported (bounded: it may be throttled).
        void outputSettled(output, OUTPUT_SETTLE_MS).then(() =>
          exec.inspect().then(
            (info) => resolve({ exitCode: info.ExitCode ?? null }),
            () => resolve({ exitCode: null }), // container removed: the events say why
          ),
        );
      };
      stream.once("end", finish);
      stream.once("close", finish);
      stream.once("error", finish);
    });
    return {
      send: (line) => stream.write(`${line}\n`),
      stop: async () => {
        // Closing stdin ends the reference agent; anything else gets ended with the exec's PID.
        stream.end();
        const ended = await Promise.race([
          exited.then(() => true),
          new Promise<boolean>((r) => setTimeout(() => r(false), 3000)),
        ]);
        const signal = async (sig: string) => {
          if (!agentPid) return;
          const kill = await container
            .exec({ Cmd: ["kill", sig, agentPid], AttachStdout: false, AttachStderr: false })
            .catch(() => undefined);
          await kill?.start({}).catch(() => undefined);
        };
        const within = (ms: number) =>
          Promise.race([
            exited.then(() => true),
            new Promise<boolean>((r) => setTimeout(() => r(false), ms)),
          ]);
        if (!ended) {
          await signal("-TERM");
          if (!(await within(3000))) await signal("-KILL");
          if (!(await within(2000))) stream.destroy();
        }
        await exited;
      },
      exited,
    };
  }

  runOnce(command: RunOnceCommand): Promise<RunOnceOutcome> {
    return runOnce(this.#docker, command);
  }

  async scaleDown(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    this.#endpoints.delete(containerName);
    await this.#stacks.scaleDown(p.namespace, p.name);
  }

  async remove(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) return; // nothing of ours: removal is idempotent
    await this.#stacks.destroy(p.namespace, p.name).catch((e: unknown) => {
      if ((e as { code?: string }).code !== "NOT_FOUND") throw e;
    });
    this.#placements.delete(containerName);
    this.#endpoints.delete(containerName);
  }

  async watch(
    onExit: (containerName: string, reason: ExitReason, detail: string) => void,
  ): Promise<() => void> {
    let stopped = false;
    let current: NodeJS.ReadableStream | undefined;
    const subscribe = async (): Promise<void> => {
      const stream = (await this.#docker.getEvents({
        filters: JSON.stringify({
          type: ["container"],
          event: ["die", "oom", "destroy"],
          label: [`${Labels.managedBy}=agent-sessions`],
        }),
      })) as NodeJS.ReadableStream;
      current = stream;
      const oomed = new Set<string>();
      // `docker rm -f` sends `die` then `destroy`: a `die` waits a moment for a `destroy` of the
      // same container, so a removal is reported as ContainerRemoved, not as an exit.
      const dying = new Map<string, NodeJS.Timeout>();
      let buffer = "";
      stream.on("data", (chunk: Buffer) => {
        buffer += chunk.toString("utf8");
        const lines = buffer.split("\n");
        buffer = lines.pop() ?? "";
        for (const line of lines) {
          if (!line.trim()) continue;
          const ev = JSON.parse(line) as { Action: string; Actor: { Attributes: Record<string, string> } };
          const name = ev.Actor.Attributes.name ?? "";
          if (ev.Action === "oom") {
            oomed.add(name);
            this.#ooms.set(name, Date.now());
          } else if (ev.Action === "die") {
            const code = ev.Actor.Attributes.exitCode ?? "?";
            const oom = oomed.delete(name);
            clearTimeout(dying.get(name));
            dying.set(
              name,
              setTimeout(() => {
                dying.delete(name);
                if (!oom && code !== "137") {
                  onExit(name, "ContainerExited", `exit code ${code}`);
                  return;
                }
                // 137 alone is also `docker kill`; the oom event (or OOMKilled) tells them apart.
                void this.#docker
                  .getContainer(name)
                  .inspect()
                  .then(
                    (info) =>
                      onExit(
                        name,
                        info.State.OOMKilled || oom ? "OOMKilled" : "ContainerExited",
                        `exit code ${code}`,
                      ),
                    () => onExit(name, oom ? "OOMKilled" : "ContainerExited", `exit code ${code}`),
                  );
              }, DIE_SETTLE_MS),
            );
          } else if (ev.Action === "destroy") {
            clearTimeout(dying.get(name));
            dying.delete(name);
            onExit(name, "ContainerRemoved", "container removed");
          }
        }
      });
      stream.once("end", () => {
        if (stopped) return;
        // The engine went away (restart): every container died with it; resubscribe when back.
        onExit("*", "EngineRestarted", "docker engine event stream ended");
        const retry = () => {
          if (!stopped) subscribe().catch(() => setTimeout(retry, 1000));
        };
        setTimeout(retry, 1000);
      });
    };
    await subscribe();
    return () => {
      stopped = true;
      (current as unknown as { destroy?: () => void })?.destroy?.();
    };
  }
}
