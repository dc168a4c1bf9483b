/**
 * `serve`'s embedded runner on a thread of its own (AGENT_SESSIONS_EMBEDDED_LINK=worker, the
 * default): the server keeps this thread's event loop, the runner (its relays, agents, engine
 * calls) gets another, so on a machine with two cores the two do not wait on each other. They
 * speak the runner protocol (proxy/PROTOCOL.md) over a port per dial
 * (contracts/runner-port-channel.ts); this thread admits each dial on the server, its bearer
 * checked as on the WebSocket upgrade.
 */
import { Worker } from "node:worker_threads";
import type { ChannelAdmission } from "../../contracts/runner-channel.ts";
import { portChannel } from "../../contracts/runner-port-channel.ts";
import type { RunnerConfig } from "../../runner/config.ts";
import { errorOf, type FromServerThread, type ToServerThread } from "./messages.ts";

export type RunnerThread = {
  /** Stops the runner and ends its thread (at most `graceMs` later, then terminated). */
  stop(graceMs?: number): Promise<void>;
  /** The thread ended without being stopped (it crashed): why. */
  readonly ended: Promise<Error>;
};

/**
 * Start the runner of `config` in a worker thread, its link admitted by `admit` (the server's
 * `admitRunnerChannel`). Resolves once it runs; rejects with the reason it could not start
 * (a missing dependency as FAILED_PRECONDITION, as `startRunner` throws it), its thread ended.
 */
export function startRunnerThread(config: RunnerConfig, admit: ChannelAdmission): Promise<RunnerThread> {
  const worker = new Worker(new URL("./worker.ts", import.meta.url), { workerData: config });
  const send = (message: FromServerThread) => worker.postMessage(message);
  let stopping = false;
  let started = false;
  let failure: Error | undefined;
  const exited = new Promise<number>((resolve) => worker.once("exit", resolve));
  worker.on("error", (error) => {
    failure ??= error;
  });
  return new Promise((resolve, reject) => {
    worker.on("message", (message: ToServerThread) => {
      switch (message.type) {
        case "dial": {
          const channel = portChannel(message.port);
          void admit(message.bearer, channel).then(
            (admitted) => {
              if (admitted.ok) send({ type: "dialed", id: message.id, ok: true });
              else {
                send({ type: "dialed", id: message.id, ...admitted });
                message.port.close();
              }
            },
            (error: unknown) => {
              send({
                type: "dialed",
                id: message.id,
                ok: false,
                status: 503,
                error: {
                  code: "UNAVAILABLE",
                  message: `the server could not admit the runner: ${String(error)}`,
                },
              });
              message.port.close();
            },
          );
          return;
        }
        case "started":
          started = true;
          resolve({
            async stop(graceMs = 3_000) {
              stopping = true;
              send({ type: "stop" });
              let timer: NodeJS.Timeout | undefined;
              const late = new Promise<"late">((r) => {
                timer = setTimeout(() => r("late"), graceMs);
              });
              if ((await Promise.race([exited, late])) === "late") await worker.terminate();
              clearTimeout(timer);
            },
            ended: exited.then(
              (code) =>
                // Stopped on purpose: never settles.
                new Promise<Error>((resolve) => {
                  if (!stopping)
                    resolve(failure ?? new Error(`the embedded runner's thread ended (exit code ${code})`));
                }),
            ),
          });
          return;
        case "failed":
          failure = errorOf(message.error);
          return;
      }
    });
    void exited.then((code) => {
      if (!started)
        reject(
          failure ?? new Error(`the embedded runner's thread ended before it started (exit code ${code})`),
        );
    });
  });
}
