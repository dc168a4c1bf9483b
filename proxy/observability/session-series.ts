import { Gauge, type Registry } from "prom-client";
import type { SessionMetrics, SessionMetricsReply } from "../../contracts/session-metrics.ts";
import type { Logger } from "./log.ts";

/** A session the sampler may measure: one whose workload runs or is frozen. */
export type SeriesCandidate = { namespace: string; name: string; phase: string };

export type SessionSeriesOptions = {
  registry: Registry;
  /** The sessions there are now (any phase; the sampler keeps the Ready and Paused ones). */
  list: () => Promise<readonly SeriesCandidate[]>;
  /** One session's metrics, read of its engine (SessionMetricsReader.read). */
  read: (namespace: string, name: string) => Promise<SessionMetricsReply>;
  /** Time between the starts of two passes; a pass that takes longer is followed at once. */
  intervalMs: number;
  /** Sessions with series at most: the first by namespace and name; the rest are counted, not shown. */
  maxSessions: number;
  /** Engine reads at once. @default 4 */
  concurrency?: number;
  log?: Logger;
};

const PREFIX = "agent_sessions_session_";
/** Phases with a workload to measure (as SessionMetricsReader). */
const MEASURED = new Set(["Ready", "Paused"]);

type Labels = { namespace: string; name: string };
type Series = { help: string; value: (m: SessionMetrics) => number | undefined };

/**
 * Per-session Prometheus series (issue 40), behind `AGENT_SESSIONS_SESSION_SERIES_MS`: a sampler
 * reads each Ready or Paused session's metrics of its engine every interval, as `GET
 * …/harnesssessions/{name}/metrics` does, and the gauges show the last pass. Labels are
 * `namespace` and `name` only, for at most `maxSessions` sessions (the first by namespace and name);
 * `agent_sessions_session_series_omitted` counts the rest, so cardinality stays bounded whatever
 * the installation holds. A session gone from a pass (stopped, deleted, failed to read) loses its
 * series at the next pass; reads are observations, never activity.
 */
export class SessionSeries {
  readonly #o: SessionSeriesOptions;
  /** The last pass's samples, by `namespace/name`. */
  #samples = new Map<string, { labels: Labels; metrics: SessionMetrics }>();
  #omitted = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #pass: Promise<void> | undefined;

  constructor(options: SessionSeriesOptions) {
    this.#o = options;
    const registers = [options.registry];
    const series: Record<string, Series> = {
      cpu_cores: {
        help: "Cores the session's workload used, averaged over the engine's sample window.",
        value: (m) => m.cpu.cores,
      },
      cpu_limit_cores: {
        help: "The session workload's CPU limit in cores (absent without one).",
        value: (m) => m.cpu.limitCores,
      },
      memory_bytes: {
        help: "The session workload's working set (in use less droppable page cache).",
        value: (m) => m.memory.bytes,
      },
      memory_limit_bytes: {
        help: "The session workload's memory limit (absent without one).",
        value: (m) => m.memory.limitBytes,
      },
      network_receive_bytes: {
        help: "Bytes the session's workload received since it started.",
        value: (m) => m.network.rxBytes,
      },
      network_transmit_bytes: {
        help: "Bytes the session's workload sent since it started.",
        value: (m) => m.network.txBytes,
      },
      volume_used_bytes: {
        help: "Bytes in use on the session's volume (absent while it cannot be read, e.g. paused).",
        value: (m) => m.volume?.usedBytes,
      },
    };
    const samples = () => this.#samples;
    for (const [suffix, { help, value }] of Object.entries(series))
      new Gauge({
        name: `${PREFIX}${suffix}`,
        help,
        labelNames: ["namespace", "name"],
        registers,
        collect() {
          this.reset();
          for (const { labels, metrics } of samples().values()) {
            const v = value(metrics);
            if (v !== undefined) this.set(labels, v);
          }
        },
      });
    const omitted = () => this.#omitted;
    new Gauge({
      name: `${PREFIX}series_omitted`,
      help: "Ready or Paused sessions left without per-session series at the last pass (past AGENT_SESSIONS_SESSION_SERIES_MAX).",
      registers,
      collect() {
        this.set(omitted());
      },
    });
  }

  /** Passes from now on, the first at once. */
  start(): void {
    const tick = async () => {
      if (this.#stopped) return;
      const started = Date.now();
      this.#pass = this.sample();
      await this.#pass;
      if (this.#stopped) return;
      this.#timer = setTimeout(tick, Math.max(0, this.#o.intervalMs - (Date.now() - started)));
      this.#timer.unref();
    };
    void tick();
  }

  /** No more passes; waits for the one under way. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#pass;
  }

  /** One pass: every measured session read (bounded concurrency), then the gauges' samples replaced. */
  async sample(): Promise<void> {
    let sessions: SeriesCandidate[];
    try {
      sessions = (await this.#o.list())
        .filter((s) => MEASURED.has(s.phase))
        .sort((a, b) => (a.namespace === b.namespace ? cmp(a.name, b.name) : cmp(a.namespace, b.namespace)));
    } catch (error) {
      this.#o.log?.("warn", "per-session series: could not list sessions", { error: String(error) });
      return;
    }
    const measured = sessions.slice(0, this.#o.maxSessions);
    const next = new Map<string, { labels: Labels; metrics: SessionMetrics }>();
    let i = 0;
    const worker = async () => {
      while (i < measured.length) {
        const s = measured[i++] as SeriesCandidate;
        try {
          const reply = await this.#o.read(s.namespace, s.name);
          next.set(`${s.namespace}/${s.name}`, {
            labels: { namespace: s.namespace, name: s.name },
            metrics: reply.metrics,
          });
        } catch {
          // Stopped or gone between the list and the read, or its runner away: no series this pass.
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, this.#o.concurrency ?? 4) }, worker));
    this.#samples = next;
    this.#omitted = sessions.length - measured.length;
  }
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
