import { API_VERSION } from "../../contracts/resources.ts";
import { KIND_OF_PLURAL } from "../../client/index.ts";
import { type CliContext, contextFrom, UsageError, watchResyncMs } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { type CliKind, KIND_NAMES, objectRef, parseKind } from "../kinds.ts";
import { formatData, type OutputFormat, parseOutput, resourceTable } from "../render.ts";
import { ClientError } from "../../client/client-error.ts";
import {
  type EventWatchEnd,
  harnessSessionOf,
  type WatchReport,
  WATCH_INTERVAL_MS,
  watchEvents,
  watchLoop,
} from "../watch.ts";

const USAGE = "get KIND [NAME] [-n NAMESPACE | -A] [-o table|wide|name|json|yaml] [-w]";

const FORMATS = ["table", "wide", "name", "json", "yaml"] as const satisfies readonly OutputFormat[];

/** The kinds `-A` lists across namespaces (`GET /v1/{plural}`). */
const CLUSTER_LISTED = new Set<CliKind>(["agentruntimes", "agents", "harnesssessions"]);

type Fetched = { data: unknown; rows: unknown[] };

/** What `get` shows now: one object, one namespace's or every namespace's list. */
async function fetchRows(
  ctx: CliContext,
  kind: CliKind,
  name: string | undefined,
  all: boolean,
): Promise<Fetched> {
  if (kind === "sessions") {
    if (name) {
      const rows = (await ctx.client.rpc("GetAgentStatus", { session_id: name })).sessions;
      return { data: rows[0], rows };
    }
    const rows = await ctx.client.allSessionStatuses();
    return { data: { sessions: rows }, rows };
  }
  if (name) {
    const one = await ctx.client.get(kind, ctx.namespace, name);
    return { data: one, rows: [one] };
  }
  const rows =
    all && kind !== "sessionsnapshots"
      ? await ctx.client.listAllNamespaces(kind)
      : await ctx.client.listAll(kind, ctx.namespace);
  return { data: { apiVersion: API_VERSION, kind: `${KIND_OF_PLURAL[kind]}List`, items: rows }, rows };
}

/** `kind/name` (an agent session by its id). */
function nameOf(kind: CliKind, row: unknown): string {
  const r = row as { metadata?: { name: string }; session_id?: string };
  return objectRef(kind, r.metadata?.name ?? r.session_id ?? "");
}

/** A row's identity across polls: namespace/name, or an agent session's id. */
function keyOf(row: unknown): string {
  const r = row as { metadata?: { name: string; namespace?: string }; session_id?: string };
  return r.metadata ? `${r.metadata.namespace ?? ""}/${r.metadata.name}` : (r.session_id ?? "");
}

/** The rows in the chosen format (a table's header only when `header`). */
function render(
  kind: CliKind,
  rows: readonly unknown[],
  format: OutputFormat,
  all: boolean,
  header: boolean,
): string {
  if (format === "name") return rows.map((r) => nameOf(kind, r)).join("\n");
  if (format === "json") return rows.map((r) => JSON.stringify(r)).join("\n");
  if (format === "yaml") return rows.map((r) => `---\n${formatData(r, "yaml")}`).join("\n");
  const text = resourceTable(kind, rows, { wide: format === "wide", namespaces: all });
  return header ? text : text.split("\n").slice(1).join("\n");
}

/**
 * `get hs [NAME] -w`: HarnessSessions followed over the event stream (every session the token
 * may see; the frames name theirs), each one read again when an event of it says it changed.
 */
function watchSessionEvents(
  ctx: CliContext,
  name: string | undefined,
  all: boolean,
  options: WatchReport<unknown> & {
    initial: readonly unknown[];
    headerShown: boolean;
    fetchAll: () => Promise<unknown[]>;
  },
): Promise<EventWatchEnd<unknown>> {
  const watched = (key: string) =>
    name !== undefined ? key === `${ctx.namespace}/${name}` : all || key.startsWith(`${ctx.namespace}/`);
  const resync = watchResyncMs();
  return watchEvents({
    ...options,
    ...(resync !== undefined ? { resyncMs: resync } : {}),
    follow: (signal, onOpen) => ctx.client.events({ signal, onOpen }),
    keyOfFrame: (frame) => {
      const key = harnessSessionOf(frame);
      return key !== undefined && watched(key) ? key : undefined;
    },
    fetchOne: async (key) => {
      const [namespace = "", session = ""] = key.split("/");
      try {
        return await ctx.client.get("harnesssessions", namespace, session);
      } catch (error) {
        if (error instanceof ClientError && error.code === "NOT_FOUND") return undefined;
        throw error;
      }
    },
  });
}

/**
 * `get`: one object or the list of a kind; `sessions` are the agent sessions of GetAgentStatus.
 * `-w` prints what there is, then each object again whenever it changes, until Ctrl-C: the
 * HarnessSessions as the event stream tells their changes (listed again every 30 s for what no
 * event reports; polled when the stream is unavailable), other kinds polled every second.
 * Deletions print as `kind/name deleted` on stderr.
 */
export const get: Command = {
  name: "get",
  usage: USAGE,
  summary: "list resources or show one (-w to watch them change)",
  description: `Lists the objects of a KIND in the namespace, or shows one by NAME.
KIND: ${KIND_NAMES}.
With -w it keeps going: each object is printed again whenever it changes, until Ctrl-C (exit 0).
HarnessSessions are watched over the server's event stream (each phase change and request outcome
reprints the row; everything is listed again every 30 s, AGENT_SESSIONS_WATCH_RESYNC_MS, for changes
no event reports, such as a session not placed yet); when the stream is unavailable it says so and
polls every second. Other kinds are polled every second.`,
  flags: [
    ["-o, --output FORMAT", "table (default), wide (more columns), name (kind/name lines), json or yaml"],
    ["-w, --watch", "after the first answer, print each object again when it changes; Ctrl-C ends"],
    ["-A, --all-namespaces", "every namespace's objects, with a NAMESPACE column (admin token)"],
  ],
  examples: [
    "agent-sessions get hs                          # the sessions of namespace default",
    "agent-sessions get hs -o wide                  # with runtime, errors, last outcome, session id",
    "agent-sessions get hs -A                       # every namespace's",
    "agent-sessions get hs coding -w                # watch one session's phase change",
    "agent-sessions get agents -o name              # agent/alice lines, for scripts",
    "agent-sessions get hs coding -o yaml           # the whole object",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      output: { type: "string", short: "o" },
      watch: { type: "boolean", short: "w", default: false },
      "all-namespaces": { type: "boolean", short: "A", default: false },
    });
    const [kindText, name] = positionals(parsed.positionals, ["KIND", "NAME"], USAGE, 1);
    const kind = parseKind(kindText ?? "");
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json, FORMATS);
    const all = parsed.values["all-namespaces"];
    if (all && name)
      throw new UsageError("-A lists every namespace's objects: give no NAME (use -n NAMESPACE with a NAME)");
    if (all && parsed.values.namespace !== undefined) throw new UsageError("-A and -n together: pick one");
    if (all && !CLUSTER_LISTED.has(kind) && kind !== "sessions")
      throw new UsageError(
        `-A lists ${[...CLUSTER_LISTED].join(", ")} (and sessions); ${kind} are listed per namespace`,
      );
    const first = await fetchRows(ctx, kind, name, all);
    const tableLike = format === "table" || format === "wide";
    if (!parsed.values.watch) {
      if (format === "json" || format === "yaml") ctx.out(formatData(first.data, format));
      else if (first.rows.length === 0)
        ctx.note(`no ${kind} in ${all ? "any namespace" : `namespace ${ctx.namespace}`}`);
      else ctx.out(render(kind, first.rows, format, all, true));
      return 0;
    }
    if (first.rows.length > 0) ctx.out(render(kind, first.rows, format, all, true));
    else if (tableLike)
      ctx.note(`no ${kind} in ${all ? "any namespace" : `namespace ${ctx.namespace}`} yet; watching`);
    const report = {
      keyOf,
      // A status change that changes no printed column (a message, a condition's time) prints nothing.
      lineOf: (row: unknown) => (tableLike ? render(kind, [row], format, all, false) : JSON.stringify(row)),
      changed: (rows: unknown[], headerShown: boolean) =>
        ctx.out(render(kind, rows, format, all, !headerShown && tableLike)),
      deleted: (row: unknown) => ctx.note(`${nameOf(kind, row)} deleted`),
      onError: (error: unknown) =>
        ctx.note(`watch: ${error instanceof Error ? error.message : String(error)}; retrying`),
    };
    const fetchAll = async () => (await fetchRows(ctx, kind, name, all)).rows;
    let initial = first.rows;
    let headerShown = first.rows.length > 0;
    if (kind === "harnesssessions") {
      const end = await watchSessionEvents(ctx, name, all, { ...report, initial, headerShown, fetchAll });
      if (end.ended === "interrupted") return 0;
      const { error } = end;
      // A refused stream (the token expired or lost its scope) is the watch's end: said as any error is.
      if (
        error instanceof ClientError &&
        (error.code === "UNAUTHENTICATED" || error.code === "PERMISSION_DENIED")
      )
        throw error;
      ctx.note(
        `watch: the event stream is unavailable (${error instanceof Error ? error.message : String(error)}); polling every ${WATCH_INTERVAL_MS / 1000} s instead`,
      );
      initial = end.rows;
      headerShown = end.headerShown;
    }
    await watchLoop({ ...report, initial, fetch: fetchAll, headerShown });
    return 0;
  },
};
