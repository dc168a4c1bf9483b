/**
 * Execs the agent into a Docker session container over a long-lived hijacked exec stream (the
 * twin of runner/kubernetes/exec.ts): stdout demultiplexed into the session's output with its
 * backpressure held all the way back to the agent, stderr read for the agent's PID note, and a
 * deliberate stop that closes stdin, then signals that PID (runner/engine/agent-exec.ts).
 *
 * An exec stream cut by `docker rm -f` loses its exit code; the engine events the driver watches
 * say what happened then (runner/docker/driver.ts).
 */
import { PassThrough } from "node:stream";
import type Docker from "dockerode";
import {
  AgentPidReader,
  agentExecCommand,
  agentSignalCommand,
  signalUntilEnded,
} from "../engine/agent-exec.ts";
import { type AgentOutput, type AgentProcess, outputSettled } from "../engine/driver.ts";

/** How long an ended agent's exit waits for its last output to be taken. */
const OUTPUT_SETTLE_MS = 2_000;

/** Starts `command` in the (running) container, its stdout piped into `output`. */
export async function startAgentExec(
  docker: Docker,
  containerName: string,
  command: string[],
  output: AgentOutput,
  /** The agent's stderr past the PID note, as it comes (the session's logs). */
  onStderr?: (chunk: string) => void,
): Promise<AgentProcess> {
  const container = docker.getContainer(containerName);
  const exec = await container.exec({
    // The shell reports the agent's PID in the container's PID namespace, then becomes the
    // agent: a stop that closing stdin does not finish can signal exactly that process.
    Cmd: agentExecCommand(command),
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  });
  const stream = await exec.start({ hijack: true, stdin: true });
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  docker.modem.demuxStream(stream, stdout, stderr);
  // demuxStream writes without looking at write()'s answer: the exec stream itself is held
  // while stdout is full, so a slow `output` backs up through dockerd to the agent's writes.
  stream.on("data", () => {
    if (stdout.writableNeedDrain) stream.pause();
  });
  stdout.on("drain", () => stream.resume());
  stdout.pipe(output);
  // The agent's stderr is its own log; frames come from stdout only. Its first line is our PID note.
  const agentPid = new AgentPidReader();
  stderr.setEncoding("utf8");
  stderr.on("data", (chunk: string) => {
    agentPid.feed(chunk);
    onStderr?.(chunk);
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
      const signal = async (name: "TERM" | "KILL") => {
        const pid = agentPid.value;
        if (!pid) return;
        const kill = await container
          .exec({ Cmd: agentSignalCommand(name, pid), AttachStdout: false, AttachStderr: false })
          .catch(() => undefined);
        await kill?.start({}).catch(() => undefined);
      };
      const within = (ms: number) =>
        Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
      if (!ended && !(await signalUntilEnded(signal, within))) stream.destroy();
      await exited;
    },
    exited,
  };
}

/** Output kept from a short command (`execOutput`), each stream at most this many characters. */
const SHORT_OUTPUT_CHARS = 64 * 1024;

/**
 * A short command in the (running) container, as its user, to its end: its stdout and stderr (each
 * bounded) and exit code. Aborting `signal` ends the exec stream.
 */
export async function execOutput(
  docker: Docker,
  containerName: string,
  argv: string[],
  signal?: AbortSignal,
): Promise<{ stdout: string; stderr: string; exitCode: number | null }> {
  const exec = await docker
    .getContainer(containerName)
    .exec({ Cmd: argv, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  signal?.addEventListener("abort", () => stream.destroy(), { once: true });
  const collect = () => {
    const sink = new PassThrough();
    let text = "";
    sink.on("data", (chunk: Buffer) => {
      if (text.length < SHORT_OUTPUT_CHARS) text += chunk.toString("utf8");
    });
    return { sink, text: () => text.slice(0, SHORT_OUTPUT_CHARS) };
  };
  const out = collect();
  const err = collect();
  docker.modem.demuxStream(stream, out.sink, err.sink);
  await new Promise<void>((resolve) => {
    stream.once("end", resolve);
    stream.once("close", resolve);
    stream.once("error", () => resolve());
  });
  return { stdout: out.text(), stderr: err.text(), exitCode: await execExitCode(exec) };
}

/**
 * An ended exec's exit code as the engine records it: its stream can end a moment before the
 * engine does (asked again every 20 ms, up to a second); null when it still runs or never said.
 */
export async function execExitCode(exec: Docker.Exec): Promise<number | null> {
  let { ExitCode, Running } = await exec.inspect();
  for (let i = 0; Running && i < 50; i++) {
    await new Promise((r) => setTimeout(r, 20));
    ({ ExitCode, Running } = await exec.inspect());
  }
  return ExitCode ?? null;
}
