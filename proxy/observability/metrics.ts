import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { SessionState } from "../../contracts/compass.ts";
import { HarnessPhase } from "../../contracts/harness-session.ts";
import type { Logger } from "./log.ts";

/** How a proxied request ended: the adapter's outcome, or `rejected` before it reached the agent. */
export type ProxiedOutcome = "succeeded" | "failed" | "cancelled" | "rejected";

/** Where the scrape-time gauges read the current state; each is optional. */
export type MetricsSources = {
  /** How many retained agent sessions are in each state (counted by the store, not listed). */
  sessionStates?: () => Promise<ReadonlyMap<string, number>>;
  /** How many HarnessSessions are in each phase. */
  harnessPhases?: () => Promise<ReadonlyMap<string, number>>;
  /** Runner links attached and reconciled. */
  runnerLinks?: () => number;
};

export type MetricsOptions = {
  /** Node.js process metrics (`process_*`, `nodejs_*`). @default true */
  processMetrics?: boolean;
  /** Where a failing source is reported (the scrape still succeeds without that gauge). */
  log?: Logger;
};

const PREFIX = "agent_sessions_";
/** Relayed requests: a short answer up to the proxy's 120 s deadline. */
const RELAY_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Runner commands: a send takes milliseconds, a stack up about a minute. */
const COMMAND_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const RPC_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 300];
/** Idle sweeps: a pass over every HarnessSession, milliseconds for a few, more for 10,000. */
const SWEEP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * The server's Prometheus metrics (`GET /metrics`), one registry per server. Other modules
 * call the `record*` hooks; the gauges read their sources when scraped, so they are never stale.
 * Label values are bounded sets (RPC method names, gRPC codes, command kinds, outcomes; the
 * gateway's counters: namespaces and Agents, which an operator declares), never ids or names of
 * sessions.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly #rpcRequests: Counter<"method" | "code">;
  readonly #rpcDuration: Histogram<"method">;
  readonly #proxiedRequests: Counter<"outcome">;
  readonly #relayDuration: Histogram<"outcome" | "stream">;
  readonly #commandDuration: Histogram<"kind" | "code">;
  readonly #idleSweepDuration: Histogram;
  readonly #gatewayTokens: Counter<"namespace" | "agent" | "direction">;
  readonly #gatewayCalls: Counter<"namespace" | "agent">;
  readonly #gatewayRefusals: Counter<"namespace" | "agent" | "reason">;
  #sources: MetricsSources = {};
  readonly #log: Logger | undefined;

  constructor(options: MetricsOptions = {}) {
    this.#log = options.log;
    const registers = [this.registry];
    this.#rpcRequests = new Counter({
      name: `${PREFIX}rpc_requests_total`,
      help: "Lifecycle RPCs answered, by method and gRPC code (OK on success).",
      labelNames: ["method", "code"],
      registers,
    });
    this.#rpcDuration = new Histogram({
      name: `${PREFIX}rpc_duration_seconds`,
      help: "Time to answer a lifecycle RPC.",
      labelNames: ["method"],
      buckets: RPC_BUCKETS,
      registers,
    });
    this.#proxiedRequests = new Counter({
      name: `${PREFIX}proxied_requests_total`,
      help: "Requests to HarnessSessions through the proxy, by outcome (rejected: refused before reaching the agent).",
      labelNames: ["outcome"],
      registers,
    });
    this.#relayDuration = new Histogram({
      name: `${PREFIX}relay_duration_seconds`,
      help: "Time from receiving a proxied request to the end of its reply (a streamed reply's last event).",
      labelNames: ["outcome", "stream"],
      buckets: RELAY_BUCKETS,
      registers,
    });
    this.#commandDuration = new Histogram({
      name: `${PREFIX}runner_command_duration_seconds`,
      help: "Runner commands by kind and gRPC code; provision, scale_down and remove are stack operations.",
      labelNames: ["kind", "code"],
      buckets: COMMAND_BUCKETS,
      registers,
    });
    this.#idleSweepDuration = new Histogram({
      name: `${PREFIX}idle_sweep_duration_seconds`,
      help: "Time of one idle-controller pass over every HarnessSession (stale requests, idleness, resync).",
      buckets: SWEEP_BUCKETS,
      registers,
    });
    this.#gatewayTokens = new Counter({
      name: `${PREFIX}gateway_tokens_total`,
      help: "Tokens of the model calls the runners' gateways relayed, as the provider reported them, by namespace, Agent and direction (input|output).",
      labelNames: ["namespace", "agent", "direction"],
      registers,
    });
    this.#gatewayCalls = new Counter({
      name: `${PREFIX}gateway_model_calls_total`,
      help: "Model calls the runners' gateways relayed (with or without reported usage), by namespace and Agent.",
      labelNames: ["namespace", "agent"],
      registers,
    });
    this.#gatewayRefusals = new Counter({
      name: `${PREFIX}gateway_refusals_total`,
      help: "Model calls the runners' gateways refused, by namespace, Agent and reason (TokenBudgetExceeded, RequestRateExceeded, ModelNotAllowed).",
      labelNames: ["namespace", "agent", "reason"],
      registers,
    });
    const metrics = this;
    new Gauge({
      name: `${PREFIX}sessions`,
      help: "Agent sessions retained, by state.",
      labelNames: ["state"],
      registers,
      async collect() {
        const states = await metrics.#read("sessionStates");
        this.reset();
        if (states) for (const [state, n] of countBy(SessionState.options, states)) this.set({ state }, n);
      },
    });
    new Gauge({
      name: `${PREFIX}harness_sessions`,
      help: "HarnessSessions, by status.phase.",
      labelNames: ["phase"],
      registers,
      async collect() {
        const phases = await metrics.#read("harnessPhases");
        this.reset();
        if (phases) for (const [phase, n] of countBy(HarnessPhase.options, phases)) this.set({ phase }, n);
      },
    });
    new Gauge({
      name: `${PREFIX}runner_links`,
      help: "Runners attached over the runner link.",
      registers,
      collect() {
        const links = metrics.#sources.runnerLinks;
        if (links) this.set(links());
      },
    });
    if (options.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /** Where the scrape-time gauges read; replaces earlier sources. */
  observe(sources: MetricsSources): void {
    this.#sources = { ...this.#sources, ...sources };
  }

  /** One answered RPC; `code` is "OK" or the error's gRPC code. */
  recordRpc(method: string, code: string, seconds: number): void {
    this.#rpcRequests.inc({ method, code });
    this.#rpcDuration.observe({ method }, seconds);
  }

  /** One proxied request, once, when its reply ended. */
  recordProxiedRequest(outcome: ProxiedOutcome, stream: boolean, seconds: number): void {
    this.#proxiedRequests.inc({ outcome });
    this.#relayDuration.observe({ outcome, stream: String(stream) }, seconds);
  }

  /** One runner command settled (`code` "OK" or the failure's gRPC code). */
  recordRunnerCommand(kind: string, code: string, seconds: number): void {
    this.#commandDuration.observe({ kind, code }, seconds);
  }

  /** One model call a runner's gateway relayed; `usage` absent when the provider reported none. */
  recordGatewayCall(
    labels: { namespace: string; agent: string },
    usage: { input_tokens: number; output_tokens: number } | undefined,
  ): void {
    this.#gatewayCalls.inc(labels);
    if (!usage) return;
    this.#gatewayTokens.inc({ ...labels, direction: "input" }, usage.input_tokens);
    this.#gatewayTokens.inc({ ...labels, direction: "output" }, usage.output_tokens);
  }

  /** One model call a runner's gateway refused. */
  recordGatewayRefusal(labels: { namespace: string; agent: string }, reason: string): void {
    this.#gatewayRefusals.inc({ ...labels, reason });
  }

  /** One idle-controller sweep finished. */
  recordIdleSweep(seconds: number): void {
    this.#idleSweepDuration.observe(seconds);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The text exposition of every metric. */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  async #read(source: "sessionStates" | "harnessPhases"): Promise<ReadonlyMap<string, number> | undefined> {
    const read = this.#sources[source];
    if (!read) return undefined;
    try {
      return await read();
    } catch (error) {
      // A scrape during shutdown (store closed) leaves the gauge out instead of failing the scrape.
      this.#log?.("warn", "metrics source failed", { source, error: String(error) });
      return undefined;
    }
  }
}

/** Counts of each known value (0 for the absent), plus any unknown value seen. */
function countBy(known: readonly string[], counted: ReadonlyMap<string, number>): Map<string, number> {
  const counts = new Map<string, number>(known.map((k) => [k, 0]));
  for (const [value, n] of counted) counts.set(value, (counts.get(value) ?? 0) + n);
  return counts;
}
