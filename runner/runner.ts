/**
 * A runner: the link to the server, the engine driver, and the authoritative set of agent
 * sessions. Owns every container and stack operation; the server only asks.
 */
import { CodedError } from "../contracts/errors.ts";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../contracts/runner-protocol.ts";
import { AgentSessions } from "./agent-sessions.ts";
import type { RunnerConfig } from "./config.ts";
import type { EngineDriver } from "./driver.ts";
import { RunnerLink } from "./link.ts";

export type Log = (level: "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>) => void;

export const jsonLog =
  (component: string): Log =>
  (level, msg, fields) =>
    process.stderr.write(
      `${JSON.stringify({ level, time: new Date().toISOString(), component, msg, ...fields })}\n`,
    );

export class Runner {
  readonly link: RunnerLink;
  readonly sessions: AgentSessions;
  readonly #driver: EngineDriver;
  readonly #log: Log;
  #unwatch: (() => void) | undefined;

  constructor(config: RunnerConfig, driver: EngineDriver, log: Log = jsonLog("runner")) {
    this.#driver = driver;
    this.#log = log;
    this.sessions = new AgentSessions(driver, {
      frame: (session_id, frame) =>
        this.link.send({ version: RUNNER_PROTOCOL_VERSION, type: "frame", payload: { session_id, frame } }),
      state: (session_id, state, reason) =>
        this.link.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "session_state",
          payload: { session_id, state, ...(reason ? { reason } : {}) },
        }),
    });
    this.link = new RunnerLink(
      {
        serverUrl: config.serverUrl,
        token: config.token,
        name: config.name,
        engine: config.engine,
        capacity: config.capacity,
        labels: config.labels,
      },
      { sessions: () => this.sessions.report(), command: (c) => this.#run(c), log },
    );
  }

  async start(): Promise<void> {
    this.#unwatch = await this.#driver.watch((containerName, reason, detail) => {
      this.#log("warn", "workload exited", { containerName, reason, detail });
      this.sessions.workloadExited(containerName, reason, detail);
    });
    this.link.start();
  }

  stop(): void {
    this.link.close();
    this.#unwatch?.();
  }

  async #run(command: RunnerCommand): Promise<Record<string, unknown>> {
    const started = Date.now();
    try {
      return await this.#dispatch(command);
    } finally {
      this.#log("info", "command done", { kind: command.kind, ms: Date.now() - started });
    }
  }

  async #dispatch(command: RunnerCommand): Promise<Record<string, unknown>> {
    switch (command.kind) {
      case "provision": {
        const r = await this.#driver.provision(command.container_name, command.spec, {
          credentials: command.credentials,
          adapterToken: command.adapter_token,
        });
        return {
          container_name: r.containerName,
          endpoint: r.endpoint,
          resolved_image_digest: r.resolvedImageDigest,
        };
      }
      case "start":
        return { state: await this.sessions.start(command.session_id, command.container_name) };
      case "stop":
        return { state: await this.sessions.stop(command.session_id) };
      case "send":
        this.sessions.send(command.session_id, command.line);
        return {};
      case "scale_down":
        await this.sessions.stopWorkspace(command.container_name);
        await this.#driver.scaleDown(command.container_name);
        return { container_name: command.container_name };
      case "remove":
        await this.sessions.stopWorkspace(command.container_name);
        await this.#driver.remove(command.container_name);
        this.sessions.forgetWorkspace(command.container_name);
        return { container_name: command.container_name, removed: true };
      case "relay":
      case "cancel_relay":
        throw new CodedError("UNIMPLEMENTED", `${command.kind} is not implemented by this runner yet`);
      default: {
        const never: never = command;
        throw new CodedError("INVALID_ARGUMENT", `unknown command ${JSON.stringify(never)}`);
      }
    }
  }
}
