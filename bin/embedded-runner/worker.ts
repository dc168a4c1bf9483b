/**
 * The embedded runner's thread (`serve`, AGENT_SESSIONS_EMBEDDED_LINK=worker): the runner of
 * runner/main.ts with the config `serve` computed (bin/commands/serve.ts), its link a port to the
 * server's thread (contracts/runner-port-channel.ts). Started by ./thread.ts, which admits each
 * dial on the server and answers it here; the thread protocol is ./messages.ts.
 */
import { MessageChannel, type MessagePort, parentPort, workerData } from "node:worker_threads";
import type { DialOutcome } from "../../contracts/runner-channel.ts";
import { portChannel } from "../../contracts/runner-port-channel.ts";
import type { RunnerConfig } from "../../runner/config.ts";
import { startRunner } from "../../runner/main.ts";
import { type FromServerThread, type ToServerThread, thrownOf } from "./messages.ts";

if (!parentPort) throw new Error("bin/embedded-runner/worker.ts runs in a worker thread (./thread.ts)");
const parent = parentPort;
const post = (message: ToServerThread, transfer: MessagePort[] = []) => parent.postMessage(message, transfer);

/** Dials waiting for the server thread's answer, by id. */
const dials = new Map<number, (outcome: DialOutcome) => void>();
let dialed = 0;

function dial(bearer: string): Promise<DialOutcome> {
  const id = ++dialed;
  const { port1, port2 } = new MessageChannel();
  // This end exists before the answer: the server's first frames wait in it until the link listens.
  const channel = portChannel(port1);
  post({ type: "dial", id, bearer, port: port2 }, [port2]);
  return new Promise((resolve) => {
    dials.set(id, (outcome) => {
      if (!outcome.ok) port1.close();
      resolve(outcome.ok ? { ok: true, channel } : outcome);
    });
  });
}

let runner: { stop(): void } | undefined;
parent.on("message", (message: FromServerThread) => {
  switch (message.type) {
    case "dialed": {
      const answer = dials.get(message.id);
      dials.delete(message.id);
      answer?.(
        message.ok
          ? { ok: true, channel: undefined as never }
          : { ok: false, status: message.status, error: message.error },
      );
      return;
    }
    case "stop":
      runner?.stop();
      // What the stop sent (the link's close) is posted; the thread ends with its handles.
      setImmediate(() => process.exit(0));
      return;
  }
});

try {
  runner = await startRunner(workerData as RunnerConfig, { dial });
  post({ type: "started" });
} catch (error) {
  post({ type: "failed", error: thrownOf(error) });
  setImmediate(() => process.exit(1));
}
