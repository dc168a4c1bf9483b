// The agent-sessions web UI: plain DOM, the public API only through the typed client (client/),
// the token in sessionStorage. The server bundles this module for the browser (ui-route.ts).
// EventSource cannot send an Authorization header, so the client reads server-sent events with fetch.
//
// Any token works (README "Scoped tokens"): `admin`, `namespace:<ns>:edit|view`, or a
// `session:<ns>/<name>:chat` token a portal backend minted for this browser, which it may hand
// over in the URL fragment (`/ui/#token=…`: a fragment is never sent to a server or logged).
// GET /v1/whoami says what the token may do; the page shows only that.

import { AgentSessionsClient, ClientError } from "../../../client/index.ts";
import type { Usage } from "../../../contracts/adapter.ts";
import type { DesiredState, HarnessSession } from "../../../contracts/harness-session.ts";
import type { SessionSnapshot } from "../../../contracts/session-snapshot.ts";
import type { Transcript } from "../../../contracts/session-transcript.ts";
import { TRANSCRIPT_FILE } from "../../../contracts/transcript-file.ts";
import type { WorkspaceEntry } from "../../../contracts/workspace-files.ts";
import {
  type PageContext,
  showAgents,
  showRunners,
  showRuntimes,
  showWebhooks,
  wireAgentForm,
  wireWebhookForm,
} from "./catalog-pages.ts";
import { $, el, errorText, field, form, showError } from "./dom.ts";
import { renderMarkdown } from "./markdown.ts";
import { tokenToUse } from "./token-handover.ts";

const TOKEN_KEY = "agent-sessions.token";
let NS = "default";

type Role = "edit" | "view" | "chat";
/** A tool call the agent made while answering, as its streamed reply said (runtimes declaring `tools`). */
type ToolCall = { id: string; name: string; done: boolean; failed: boolean };
type Message = {
  who: "user" | "assistant";
  text: string;
  done: boolean;
  failed?: boolean;
  tools?: ToolCall[];
};
type Sent = { id: string; input: string; outcome: string; usage: Usage | undefined };

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) ?? "",
  /** Built on connect with the token; every API call and the event stream go through it. */
  client: undefined as AgentSessionsClient | undefined,
  sessions: [] as HarnessSession[],
  /** The namespace's snapshots (not read with a session token: they are not its to see). */
  snapshots: [] as SessionSnapshot[],
  selected: undefined as string | undefined,
  /** Per session: the requests sent from this page, newest first. */
  history: new Map<string, Sent[]>(),
  /** Per session: the transcript shown in the chat pane. */
  transcripts: new Map<string, Message[]>(),
  /** Per agent session id: the MCP tool calls its events carried since this page connected, newest first. */
  toolCalls: new Map<string, ToolCallRow[]>(),
  /** Per agent session (status.sessionId): its events as the stream brought them, newest first. */
  eventLog: new Map<string, { at: string; text: string }[]>(),
  busy: new Set<string>(),
  /** Sessions whose transcript file was read (or found absent) since the page opened or restored them. */
  transcriptRead: new Set<string>(),
  /** Per session: the id of the request this page has in flight (what Cancel cancels). */
  inFlight: new Map<string, string>(),
  events: undefined as AbortController | undefined,
  /** What the token may do here: "edit" (create, stop, delete, chat), "view" (read), "chat" (its session). */
  role: "edit" as Role,
  /** The admin token: every namespace, the runners. */
  admin: false,
  /** Each namespace the token's scopes name, with its widest role there. */
  roles: new Map<string, Role>(),
  /** With a session token: the one session it opens. */
  only: undefined as string | undefined,
  /** The workspace pane: whose workspace it shows and the directory listed ("" is /workspace). */
  ws: { session: undefined as string | undefined, path: "", phase: undefined as string | undefined },
};

/** One MCP tool call through the gateway (a `tool` frame with `source: "mcp"`, docs/mcp.md). */
type ToolCallRow = { server: string; tool: string; outcome: string; durationMs: number; at: string };
/** Tool calls kept per session in the page. */
const TOOL_CALLS_KEPT = 50;

/** At most this much of a file (or a diff) is shown in the page. */
const VIEW_MAX_BYTES = 256 * 1024;

/** The connected client; only called while connected. */
function api(): AgentSessionsClient {
  if (!state.client) throw new Error("not connected");
  return state.client;
}

/**
 * The namespace, role and session the token's scopes give this page (the widest one wins).
 * Parsed here rather than with contracts/access.ts' parseScope: that module reaches node:crypto.
 */
/** Each namespace the token's scopes name, with the widest role it has there. */
function namespacesOf(scopes: string[]): Map<string, Role> {
  const rank: Record<Role, number> = { chat: 0, view: 1, edit: 2 };
  const roles = new Map<string, Role>();
  for (const [kind, target = "", role] of scopes.map((x) => x.split(":"))) {
    const [ns, r]: [string | undefined, Role | undefined] =
      kind === "namespace" && (role === "edit" || role === "view")
        ? [target, role]
        : kind === "session"
          ? [target.split("/")[0], "chat"]
          : [undefined, undefined];
    const had = ns === undefined ? undefined : roles.get(ns);
    if (ns && r && (had === undefined || rank[r] > rank[had])) roles.set(ns, r);
  }
  return roles;
}

function accessOf(scopes: string[]): { namespace: string; role: Role; only: string | undefined } {
  if (scopes.includes("admin")) return { namespace: "default", role: "edit", only: undefined };
  const parsed = scopes.map((s) => s.split(":"));
  const edit = parsed.find((p) => p[0] === "namespace" && p[2] === "edit");
  if (edit?.[1]) return { namespace: edit[1], role: "edit", only: undefined };
  const view = parsed.find((p) => p[0] === "namespace" && p[2] === "view");
  if (view?.[1]) return { namespace: view[1], role: "view", only: undefined };
  const session = parsed.find((p) => p[0] === "session");
  const [namespace, name] = session?.[1]?.split("/") ?? [];
  if (namespace && name) return { namespace, role: "chat", only: name };
  return { namespace: "default", role: "view", only: undefined };
}

const refused = (error: unknown) => error instanceof ClientError && error.code === "UNAUTHENTICATED";

// ---- sessions ----

let refreshing: Promise<void> | undefined;
let refreshAgain = false;
function refresh(): Promise<void> {
  if (refreshing) {
    refreshAgain = true;
    return refreshing;
  }
  refreshing = (async () => {
    do {
      refreshAgain = false;
      try {
        // A session token reads its one session; the namespace list is not its to read.
        // Otherwise every page (`metadata.continue`), already in name order.
        [state.sessions, state.snapshots] = state.only
          ? [[await api().get("harnesssessions", NS, state.only)], []]
          : await Promise.all([api().listAll("harnesssessions", NS), api().listAll("sessionsnapshots", NS)]);
        showError("global-error");
      } catch (error) {
        if (refused(error)) return disconnect("the token was refused");
        showError("global-error", error);
      }
      render();
    } while (refreshAgain);
  })().finally(() => {
    refreshing = undefined;
  });
  return refreshing;
}

/** A status frame says an agent session moved; its HarnessSession follows shortly. */
function refreshSoon(): void {
  void refresh();
  setTimeout(refresh, 400);
  setTimeout(refresh, 1500);
}

/** `42s`, `5m`, `3h`, `2d` since `iso` (kubectl's AGE). */
function ago(iso: string): string {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

const settled = (s: HarnessSession) =>
  s.metadata.deletionTimestamp === undefined &&
  ((s.spec.desiredState === "running" && (s.status.phase === "Ready" || s.status.phase === "Failed")) ||
    (s.spec.desiredState === "paused" && s.status.phase === "Paused") ||
    (s.spec.desiredState === "stopped" && s.status.phase === "Stopped"));

// Live updates come from /v1/events; while a session is still on its way this also looks every
// second, and otherwise every 15 s as a safety net.
let lastPoll = 0;
setInterval(() => {
  if (!state.client || $("app").hidden) return;
  const moving = state.sessions.some((s) => !settled(s) || s.status.activeRequests > 0);
  if (moving || Date.now() - lastPoll > 15_000) {
    lastPoll = Date.now();
    void refresh();
  }
}, 1000);

function phaseBadge(session: HarnessSession): HTMLSpanElement {
  const phase = session.metadata.deletionTimestamp ? "Deleting" : session.status.phase;
  return el("span", { className: `phase phase-${phase}`, textContent: phase, dataset: { field: "phase" } });
}

/** The tier a session is in (running, paused, stopped), and since when it is paused. */
function tierOf(session: HarnessSession): string {
  switch (session.status.phase) {
    case "Ready":
      return "running";
    case "Paused":
      return session.status.pausedAt
        ? `paused since ${new Date(session.status.pausedAt).toLocaleTimeString()}`
        : "paused";
    case "Stopped":
      return "stopped";
    default:
      return "";
  }
}

function readyCondition(session: HarnessSession) {
  return session.status.conditions.find((c) => c.type === "Ready");
}

function actions(name: string, session: HarnessSession, busy: boolean): (Node | string)[] {
  if (state.role !== "edit") return [];
  const button = (textContent: string, desired: DesiredState) =>
    el("button", {
      type: "button",
      textContent,
      disabled: busy,
      onclick: () => void setDesired(name, desired),
    });
  const desired = session.spec.desiredState;
  const paused = desired === "paused" || session.status.phase === "Paused";
  // Running: pause or stop; paused: wake or stop; stopped: resume; failed: resume (a new
  // generation: the controller tries again) or stop.
  const toggles =
    desired === "stopped"
      ? [button("Resume", "running")]
      : session.status.phase === "Failed"
        ? [button("Resume", "running"), " ", button("Stop", "stopped")]
        : paused
          ? [button("Wake", "running"), " ", button("Stop", "stopped")]
          : [button("Pause", "paused"), " ", button("Stop", "stopped")];
  const del = el("button", {
    type: "button",
    className: "danger",
    textContent: "Delete",
    disabled: busy,
    onclick: () => void remove(name),
  });
  return [...toggles, " ", del];
}

function render(): void {
  const body = $("sessions");
  body.replaceChildren();
  for (const s of state.sessions) {
    const name = s.metadata.name;
    const busy = state.busy.has(name) || s.metadata.deletionTimestamp !== undefined;
    const row = el(
      "tr",
      { className: name === state.selected ? "selected" : "", dataset: { session: name } },
      el(
        "td",
        { className: "name" },
        el("a", {
          href: "#",
          textContent: name,
          onclick: (e) => {
            e.preventDefault();
            select(name);
          },
        }),
      ),
      el("td", { className: "wide", textContent: s.spec.agentRef }),
      el("td", { className: "wide", textContent: s.spec.runtimeRef }),
      el("td", { className: "wide", textContent: s.spec.desiredState }),
      el(
        "td",
        { title: readyCondition(s)?.message ?? "" },
        phaseBadge(s),
        " ",
        el("span", { className: "tier", textContent: tierOf(s), dataset: { field: "tier" } }),
      ),
      el("td", { textContent: String(s.status.requestCount), dataset: { field: "requests" } }),
      el("td", {
        className: "age",
        textContent: ago(s.metadata.creationTimestamp),
        title: new Date(s.metadata.creationTimestamp).toLocaleString(),
        dataset: { field: "age" },
      }),
      el("td", {
        className: "age",
        textContent: s.status.lastActivityTime ? ago(s.status.lastActivityTime) : "—",
        dataset: { field: "activity" },
      }),
      el("td", { className: "actions" }, ...actions(name, s, busy)),
    );
    body.append(row);
  }
  $("empty").hidden = state.sessions.length > 0;
  $("empty-edit").hidden = state.role !== "edit";
  renderDetail();
}

async function setDesired(name: string, desiredState: DesiredState): Promise<void> {
  state.busy.add(name);
  render();
  try {
    await api().patch("harnesssessions", NS, name, { spec: { desiredState } });
    showError("global-error");
  } catch (error) {
    showError("global-error", error);
  } finally {
    state.busy.delete(name);
  }
  await refresh();
}

async function remove(name: string): Promise<void> {
  if (!window.confirm(`Delete session ${name}? Its workspace and volume are destroyed.`)) return;
  state.busy.add(name);
  const s = state.sessions.find((x) => x.metadata.name === name);
  if (s) s.metadata.deletionTimestamp = new Date().toISOString();
  render();
  // DELETE answers once the workspace is torn down; the list shows Deleting meanwhile.
  const polling = setInterval(refresh, 1000);
  try {
    await api().delete("harnesssessions", NS, name);
    state.history.delete(name);
    state.transcripts.delete(name);
    if (state.selected === name) state.selected = undefined;
    showError("global-error");
  } catch (error) {
    showError("global-error", error);
  } finally {
    clearInterval(polling);
    state.busy.delete(name);
  }
  await refresh();
}

async function loadChoices(): Promise<void> {
  const [agents, runtimes] = await Promise.all([
    api().listAll("agents", NS),
    api().listAll("agentruntimes", NS),
  ]);
  const agentSelect = field<HTMLSelectElement>(form("create-form"), "agent");
  const runtimeSelect = field<HTMLSelectElement>(form("create-form"), "runtime");
  agentSelect.replaceChildren(
    ...agents.map((a) =>
      el("option", {
        value: a.metadata.name,
        textContent: a.metadata.name,
        dataset: { runtime: a.spec.runtimeRef },
      }),
    ),
  );
  runtimeSelect.replaceChildren(
    ...runtimes.map((r) => el("option", { value: r.metadata.name, textContent: r.metadata.name })),
  );
  const follow = () => {
    const runtime = agentSelect.selectedOptions[0]?.dataset.runtime;
    if (runtime) runtimeSelect.value = runtime;
  };
  agentSelect.onchange = follow;
  follow();
}

async function create(event: SubmitEvent): Promise<void> {
  event.preventDefault();
  const f = form("create-form");
  const name = field(f, "name").value.trim();
  // A repository to check out into the workspace before the agent starts (issue 18's workstream).
  const repo = field(f, "repo").value.trim();
  showError("create-error");
  try {
    // Create, never replace: a name in use is ALREADY_EXISTS, shown under the form (issue 34).
    await api().create("harnesssessions", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name, namespace: NS },
      spec: {
        agentRef: field<HTMLSelectElement>(f, "agent").value,
        runtimeRef: field<HTMLSelectElement>(f, "runtime").value,
        desiredState: "running",
        ...(repo ? { workspace: { repo: { url: repo } } } : {}),
      },
    });
    field(f, "name").value = "";
    field(f, "repo").value = "";
    state.selected = name;
  } catch (error) {
    showError("create-error", error);
  }
  await refresh();
}

// ---- chat pane ----

function select(name: string): void {
  state.selected = name;
  showError("chat-error");
  render();
  void measure(name);
  renderPorts(name);
  $("sel-logs").textContent = "";
  void loadLogs(name);
  field(form("chat-form"), "input").focus();
}

/**
 * The session's declared ports (issue 40), each with a button minting a 15-minute token of that
 * port alone (`POST …/porttokens`): shown once with the port's URL, for a portal or `curl`
 * (`Authorization: Bearer …`; a plain link cannot carry it), and the port's page previewed here:
 * fetched with that token and shown in a sandboxed frame (no scripts, no same origin: the
 * session's page can neither run nor reach the UI's token). The UI's own token never leaves this page.
 */
function renderPorts(name: string): void {
  const s = state.sessions.find((x) => x.metadata.name === name);
  showError("ports-error");
  const ports = s?.spec.ports ?? [];
  if (ports.length === 0) {
    $("sel-ports").replaceChildren(
      el("dt", { textContent: "—" }),
      el("dd", { className: "muted", textContent: "none declared" }),
    );
    return;
  }
  $("sel-ports").replaceChildren(
    ...ports.flatMap((p) => {
      const shown = el("dd", { dataset: { port: String(p.port) } });
      const mint = el("button", { type: "button", textContent: "Preview (15m token)" });
      mint.addEventListener("click", () => {
        showError("ports-error");
        api()
          .createPortToken(NS, name, p.port, { ttl: "15m" })
          .then((created) => {
            const frame = el("iframe", { className: "preview", title: `port ${p.port} of ${name}` });
            frame.setAttribute("sandbox", "");
            frame.hidden = true;
            const again = el("button", { type: "button", textContent: "Reload preview" });
            again.addEventListener("click", () => void preview(created.url, created.token, frame));
            shown.replaceChildren(
              el("code", { textContent: created.url }),
              el("br", {}),
              el("code", { textContent: created.token, title: `expires ${created.expiresAt ?? "never"}` }),
              el("br", {}),
              again,
              frame,
            );
            return preview(created.url, created.token, frame);
          })
          .catch((error: unknown) => showError("ports-error", error));
      });
      shown.replaceChildren(mint);
      return [el("dt", { textContent: `${p.name} (${p.port})` }), shown];
    }),
  );
}

/** The port's page, read with its port token, into the sandboxed frame (an answer other than 2xx: said above it). */
async function preview(url: string, token: string, frame: HTMLIFrameElement): Promise<void> {
  showError("ports-error");
  const reply = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  const body = await reply.text();
  if (!reply.ok) {
    frame.hidden = true;
    showError("ports-error", new Error(`the port answered ${reply.status}: ${body.slice(0, 200)}`));
    return;
  }
  frame.srcdoc = body;
  frame.hidden = false;
}

/** Reads what the session's workload uses now (`GET …/metrics`, about a second) into "Usage now". */
async function measure(name: string): Promise<void> {
  const s = state.sessions.find((x) => x.metadata.name === name);
  showError("metrics-error");
  if (!s || (s.status.phase !== "Ready" && s.status.phase !== "Paused")) {
    $("sel-metrics").replaceChildren(
      el("dt", { textContent: "—" }),
      el("dd", { className: "muted", textContent: "no running workload to measure" }),
    );
    return;
  }
  try {
    const { metrics: m } = await api().sessionMetrics(NS, name);
    if (state.selected !== name) return; // another session was selected meanwhile
    const of = (used: string, limit: string | undefined) => (limit ? `${used} of ${limit}` : used);
    const rows = [
      ["cpu (cores)", of(m.cpu.cores.toFixed(3), m.cpu.limitCores?.toString())],
      ["memory", of(mib(m.memory.bytes), m.memory.limitBytes ? mib(m.memory.limitBytes) : undefined)],
      ["network in/out", `${mib(m.network.rxBytes)} / ${mib(m.network.txBytes)}`],
      ["volume used", m.volume ? mib(m.volume.usedBytes) : "—"],
      ["running since", new Date(m.since).toLocaleString()],
    ];
    $("sel-metrics").replaceChildren(
      ...rows.flatMap(([k = "", v = ""]) => [
        el("dt", { textContent: k }),
        el("dd", { textContent: v, dataset: { metric: k } }),
      ]),
    );
  } catch (error) {
    showError("metrics-error", error);
  }
}

const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

$("metrics-refresh").addEventListener("click", () => void measure(state.selected ?? ""));

function transcriptOf(name: string): Message[] {
  let t = state.transcripts.get(name);
  if (!t) {
    t = [];
    state.transcripts.set(name, t);
  }
  return t;
}

/**
 * The session's own transcript (`/workspace/.transcript.json`, kept by its adapter on the volume:
 * contracts/session-transcript.ts), read once when the page shows the session: what was said
 * before a reload, or in another tab, is on screen again. Turns this page already shows (by
 * request id) are not repeated. A session without the file (no request yet, a runtime that keeps
 * none) shows what this page sent.
 */
async function loadTranscript(name: string): Promise<void> {
  state.transcriptRead.add(name);
  let file: Transcript;
  try {
    // Asked for only when there (a session without a request yet has none: no 404 in the console;
    // what this page sends from then on it shows itself).
    const root = await api().listWorkspaceFiles(NS, name, "");
    if (!root.entries.some((e) => e.name === TRANSCRIPT_FILE && e.type === "file")) return;
    const { text } = await readText(
      await api().downloadWorkspace(NS, name, TRANSCRIPT_FILE),
      4 * 1024 * 1024,
    );
    file = JSON.parse(text) as Transcript;
    if (!Array.isArray(file.turns)) return;
  } catch {
    return; // no file yet, or not JSON: nothing to add
  }
  const shown = new Set((state.history.get(name) ?? []).map((h) => h.id));
  const earlier: Message[] = file.turns
    .filter((t) => typeof t?.id === "string" && !shown.has(t.id))
    .flatMap((t) => [
      { who: "user" as const, text: String(t.input ?? ""), done: true },
      {
        who: "assistant" as const,
        text: `${t.output ?? ""}${t.outcome !== "succeeded" ? `\n[${t.outcome}${t.error ? `: ${t.error}` : ""}]` : ""}`,
        done: true,
        failed: t.outcome !== "succeeded",
        tools: (t.tools ?? []).map((x, i) => ({
          id: String(i),
          name: String(x.name),
          done: true,
          failed: Boolean(x.failed),
        })),
      },
    ]);
  state.transcripts.set(name, [...earlier, ...transcriptOf(name)]);
  if (state.selected === name) renderTranscript(name);
}

function usageText(usage: Usage | undefined): string {
  if (!usage) return "";
  if (usage === "unavailable") return "unavailable";
  return `${usage.input_tokens}/${usage.output_tokens}`;
}

function renderTranscript(name: string): void {
  const box = $("transcript");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  box.replaceChildren(
    ...transcriptOf(name).map((m) =>
      el(
        "div",
        {
          className: `msg ${m.who}${m.failed ? " failed" : ""}`,
          dataset: { who: m.who, done: String(m.done) },
        },
        el("span", {
          className: "who",
          textContent: m.who === "user" ? "you" : `agent${m.done ? "" : " …"}`,
        }),
        ...(m.tools ?? []).map((t) =>
          el("span", {
            className: `tool${t.failed ? " failed" : ""}`,
            textContent: `⚙ ${t.name}${t.done ? (t.failed ? " failed" : "") : " …"}`,
            dataset: { tool: t.name, done: String(t.done) },
          }),
        ),
        m.who === "assistant"
          ? el("div", { className: "text md" }, ...renderMarkdown(document, m.text))
          : el("span", { className: "text", textContent: m.text }),
      ),
    ),
  );
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function renderDetail(): void {
  const s = state.sessions.find((x) => x.metadata.name === state.selected);
  $("no-selection").hidden = Boolean(s);
  $("selected").hidden = !s;
  if (!s) return;
  const name = s.metadata.name;
  $("sel-name").textContent = name;
  $("sel-phase").replaceWith(Object.assign(phaseBadge(s), { id: "sel-phase" }));
  const ready = readyCondition(s);
  $("sel-reason").textContent = ready ? `${ready.reason}: ${ready.message}` : "";
  const st = s.status;
  const u = st.usage;
  const rows = [
    ["requests", String(st.requestCount)],
    ["active", String(st.activeRequests)],
    ["errors", String(st.errorCount)],
    ["last request", st.lastRequestId ?? "—"],
    ["last outcome", st.lastRequestOutcome ?? "—"],
    ["last usage (in/out)", usageText(st.lastRequestUsage) || "—"],
    ["model tokens (in/out)", `${u.inputTokens}/${u.outputTokens}`],
    ["counted by", u.source === "gateway" ? "the model gateway" : "—"],
    ["model calls reported / unavailable", `${u.reportedRequests} / ${u.unavailableRequests}`],
    ["adapter claimed (in/out)", `${st.claimedUsage.inputTokens}/${st.claimedUsage.outputTokens}`],
    ["last activity", st.lastActivityTime ? new Date(st.lastActivityTime).toLocaleString() : "—"],
    ["expires", st.expiresAt ? new Date(st.expiresAt).toLocaleString() : "never"],
  ] as const;
  $("sel-status").replaceChildren(
    ...rows.flatMap(([k, v]) => [
      el("dt", { textContent: k }),
      el("dd", { textContent: v, dataset: { field: k } }),
    ]),
  );
  renderToolCalls(st.sessionId);
  renderEvents(st.sessionId);
  $("history").replaceChildren(
    ...(state.history.get(name) ?? []).map((h) =>
      el(
        "tr",
        { dataset: { request: h.id } },
        el("td", { className: "id", textContent: h.id }),
        el("td", { textContent: h.input.length > 40 ? `${h.input.slice(0, 40)}…` : h.input }),
        el("td", { textContent: h.outcome, dataset: { field: "outcome" } }),
        el("td", { textContent: usageText(h.usage) }),
      ),
    ),
  );
  if (!state.transcriptRead.has(name) && hasWorkspace(s)) void loadTranscript(name);
  renderTranscript(name);
  if (state.ws.session !== name) {
    // Another session: nothing of the previous one's workspace stays on screen.
    state.ws = { session: name, path: "", phase: s.status.phase };
    closeView();
    $("ws-files").replaceChildren();
    $("ws-path").textContent = "/workspace";
    showError("ws-error");
    if (hasWorkspace(s)) void listWorkspace();
  } else if (state.ws.phase !== s.status.phase) {
    // A workspace made or brought back (Ready) is listed again without a click.
    state.ws.phase = s.status.phase;
    if (s.status.phase === "Ready") void listWorkspace();
  }
  $("ws-note").textContent = hasWorkspace(s)
    ? ""
    : s.status.phase === "Pending"
      ? "The workspace is listed once the session is Ready."
      : `The session is ${s.status.phase}: resume it to browse its workspace.`;
  renderSnapshots(s);
  // A request wakes a Paused session and auto-resumes a stopped one: only a session that cannot
  // answer (Failed, being deleted) or one already busy with this page's request refuses Send.
  const sending = state.inFlight.has(name);
  ($("send") as HTMLButtonElement).disabled =
    sending || s.status.phase === "Failed" || s.metadata.deletionTimestamp !== undefined;
  $("cancel").hidden = !sending;
}

// ---- snapshots pane: take one, list the session's, fork one, restore to one, delete one ----

/** `512 B`, `3.4 KiB`, `50.0 MiB`. */
function sizeText(n: number | undefined): string {
  if (n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

function renderSnapshots(session: HarnessSession): void {
  // A session token sees none (the namespace's snapshots are not its to read).
  $("snapshots-pane").hidden = state.only !== undefined;
  const name = session.metadata.name;
  const mine = state.snapshots.filter((x) => x.spec.sessionRef === name);
  $("snapshot-form").hidden = state.role !== "edit";
  $("no-snapshots").hidden = mine.length > 0;
  const busy = state.busy.has(name);
  const button = (textContent: string, onclick: () => void, className = "") =>
    el("button", { type: "button", textContent, className, disabled: busy, onclick });
  $("snapshots").replaceChildren(
    ...mine.map((snap) => {
      const ready = snap.status.phase === "Ready";
      const buttons =
        state.role === "edit"
          ? [
              ...(ready
                ? [
                    button("Fork", () => void forkSnapshot(snap)),
                    " ",
                    button("Restore", () => void restoreSnapshot(name, snap.metadata.name)),
                    " ",
                  ]
                : []),
              button("Delete", () => void deleteSnapshot(snap.metadata.name), "danger"),
            ]
          : [];
      return el(
        "tr",
        { dataset: { snapshot: snap.metadata.name } },
        el("td", { className: "name", textContent: snap.metadata.name }),
        el("td", { textContent: snap.status.phase, title: snap.status.message, dataset: { field: "phase" } }),
        el("td", { textContent: sizeText(snap.status.sizeBytes) }),
        el("td", { textContent: new Date(snap.metadata.creationTimestamp).toLocaleString() }),
        el("td", { className: "actions" }, ...buttons),
      );
    }),
  );
}

/** Runs a snapshot action with the session marked busy, its error shown under the pane. */
async function snapshotAction(session: string, action: () => Promise<unknown>): Promise<void> {
  state.busy.add(session);
  render();
  showError("snapshot-error");
  try {
    await action();
  } catch (error) {
    showError("snapshot-error", error);
  } finally {
    state.busy.delete(session);
  }
  await refresh();
}

async function takeSnapshot(event: SubmitEvent): Promise<void> {
  event.preventDefault();
  const session = state.selected;
  if (!session) return;
  const f = form("snapshot-form");
  const name = field(f, "name").value.trim();
  await snapshotAction(session, async () => {
    await api().snapshot(NS, session, name);
    field(f, "name").value = "";
  });
}

async function forkSnapshot(snap: SessionSnapshot): Promise<void> {
  const name = window.prompt(
    `Name of the new session forked from ${snap.metadata.name} (it starts with its files and conversation):`,
    `${snap.spec.sessionRef}-fork`,
  );
  if (!name) return;
  await snapshotAction(snap.spec.sessionRef, async () => {
    await api().fork(NS, snap.metadata.name, name.trim());
    state.selected = name.trim();
  });
}

async function restoreSnapshot(session: string, snapshot: string): Promise<void> {
  if (
    !window.confirm(
      `Restore ${session} to ${snapshot}? The session is stopped and brought back with the snapshot's files and conversation; what happened after it is gone.`,
    )
  )
    return;
  await snapshotAction(session, async () => {
    await api().restore(NS, session, snapshot);
    // The snapshot's transcript comes back with its volume: read again once the session is back.
    state.transcripts.delete(session);
    state.history.delete(session);
    state.transcriptRead.delete(session);
  });
}

async function deleteSnapshot(snapshot: string): Promise<void> {
  if (!window.confirm(`Delete snapshot ${snapshot}? Its storage is freed.`)) return;
  await snapshotAction(state.selected ?? "", () => api().delete("sessionsnapshots", NS, snapshot));
}

// ---- workspace pane: the tree through the files API, a file's text, the diff ----

const joinPath = (dir: string, name: string) => (dir ? `${dir}/${name}` : name);

/** A stream's text, cut at VIEW_MAX_BYTES (the rest is not read). */
async function readText(
  stream: ReadableStream<Uint8Array>,
  max = VIEW_MAX_BYTES,
): Promise<{ text: string; cut: boolean }> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { text: text + decoder.decode(), cut: false };
    bytes += value.byteLength;
    text += decoder.decode(value, { stream: true });
    if (bytes > max) {
      await reader.cancel();
      return { text: text.slice(0, max), cut: true };
    }
  }
}

function closeView(): void {
  $("ws-view").hidden = true;
  $("ws-view-title").hidden = true;
}

function showView(title: string, text: string, cut: boolean): void {
  $("ws-view-title").textContent = cut ? `${title} (the first ${VIEW_MAX_BYTES / 1024} KiB)` : title;
  $("ws-view-title").hidden = false;
  $("ws-view").textContent = text;
  $("ws-view").hidden = false;
}

/** Whether the session's workspace can be listed now (its workload runs or is frozen). */
const hasWorkspace = (s: HarnessSession) => s.status.phase === "Ready" || s.status.phase === "Paused";

// The workspace of the selected session is listed again every 10 s while the page is seen.
setInterval(() => {
  const s = state.sessions.find((x) => x.metadata.name === state.ws.session);
  if (s && s.status.phase === "Ready" && !$("app").hidden && document.visibilityState === "visible")
    void listWorkspace();
}, 10_000);

/** The latest listing asked for: an answer to an earlier one (a refresh overtaken by a click) is dropped. */
let listingSeq = 0;

/** Lists the pane's directory of the selected session's workspace. */
async function listWorkspace(path = state.ws.path): Promise<void> {
  const name = state.ws.session;
  if (!name) return;
  const seq = ++listingSeq;
  // The directory asked for last is the pane's from now on: a refresh (after a request, every
  // 10 s) lists it, not the one on screen before the click.
  state.ws.path = path;
  showError("ws-error");
  try {
    const listing = await api().listWorkspaceFiles(NS, name, path);
    // Another session was selected, or another directory asked for, meanwhile.
    if (state.ws.session !== name || seq !== listingSeq) return;
    state.ws.path = listing.path;
    $("ws-path").textContent = listing.path ? `/workspace/${listing.path}` : "/workspace";
    ($("ws-up") as HTMLButtonElement).disabled = listing.path === "";
    const entries = [...listing.entries].sort(
      (a, b) => Number(b.type === "dir") - Number(a.type === "dir") || a.name.localeCompare(b.name),
    );
    $("ws-files").replaceChildren(...entries.map((e) => workspaceRow(name, listing.path, e)));
  } catch (error) {
    if (state.ws.session === name && seq === listingSeq) showError("ws-error", error);
  }
}

function workspaceRow(session: string, dir: string, entry: WorkspaceEntry): HTMLTableRowElement {
  const path = joinPath(dir, entry.name);
  const open =
    entry.type === "dir"
      ? () => void listWorkspace(path)
      : entry.type === "file"
        ? () => void viewFile(session, path)
        : undefined;
  const label = entry.type === "dir" ? `${entry.name}/` : entry.name;
  return el(
    "tr",
    { dataset: { file: entry.name, type: entry.type } },
    el(
      "td",
      {},
      open ? el("button", { type: "button", className: "link", textContent: label, onclick: open }) : label,
    ),
    el("td", { textContent: entry.link_target ? `symlink → ${entry.link_target}` : entry.type }),
    el("td", { textContent: entry.type === "dir" ? "" : String(entry.size) }),
    el("td", { textContent: new Date(entry.mtime).toLocaleString() }),
  );
}

async function viewFile(session: string, path: string): Promise<void> {
  showError("ws-error");
  try {
    const { text, cut } = await readText(await api().downloadWorkspace(NS, session, path));
    if (state.ws.session === session) showView(`/workspace/${path}`, text, cut);
  } catch (error) {
    showError("ws-error", error);
  }
}

async function viewDiff(): Promise<void> {
  const session = state.ws.session;
  if (!session) return;
  showError("ws-error");
  try {
    const { text, cut } = await readText(await api().diffWorkspace(NS, session));
    if (state.ws.session !== session) return;
    showView("changes against the seeded commit", text || "(no changes)", cut);
  } catch (error) {
    showError("ws-error", error);
  }
}

async function send(event: SubmitEvent): Promise<void> {
  event.preventDefault();
  const name = state.selected;
  const inputField = field<HTMLTextAreaElement>(form("chat-form"), "input");
  const input = inputField.value;
  if (!name || !input.trim()) return;
  inputField.value = "";
  showError("chat-error");
  const id = `ui-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
  const transcript = transcriptOf(name);
  transcript.push({ who: "user", text: input, done: true });
  const reply: Message = { who: "assistant", text: "", done: false, failed: false, tools: [] };
  transcript.push(reply);
  const entry: Sent = { id, input, outcome: "in flight", usage: undefined };
  const history = state.history.get(name) ?? [];
  history.unshift(entry);
  state.history.set(name, history);
  state.inFlight.set(name, id);
  renderDetail();
  try {
    for await (const message of api().sendStreaming(NS, name, input, { id })) {
      if (message.type === "delta") {
        reply.text += message.text;
      } else if (message.type === "tool") {
        const calls = reply.tools ?? [];
        const call = calls.find((t) => t.id === message.call_id);
        if (!call)
          calls.push({
            id: message.call_id,
            name: message.name,
            done: message.phase === "end",
            failed: Boolean(message.is_error),
          });
        else if (message.phase === "end")
          Object.assign(call, { done: true, failed: Boolean(message.is_error) });
        reply.tools = calls;
      } else if (message.type === "result") {
        const { result } = message;
        entry.outcome = result.outcome;
        entry.usage = result.usage;
        if (!reply.text && result.output !== undefined) reply.text = result.output;
        if (result.outcome !== "succeeded") {
          reply.failed = true;
          if (result.error) reply.text += `\n[${result.outcome}: ${result.error}]`;
        }
      }
      if (state.selected === name) renderTranscript(name);
    }
    if (entry.outcome === "in flight") entry.outcome = "ended without a result";
  } catch (error) {
    reply.failed = true;
    if (!reply.text) reply.text = errorText(error);
    if (entry.outcome === "in flight") entry.outcome = failedOutcome(error);
    showError("chat-error", error);
  } finally {
    reply.done = true;
    if (state.inFlight.get(name) === id) state.inFlight.delete(name);
  }
  renderDetail();
  // What the agent did to its workspace shows without a click.
  if (state.ws.session === name) void listWorkspace();
  await refresh();
}

/** Cancels the request this page has in flight to the selected session; its reply ends `cancelled`. */
async function cancelRequest(): Promise<void> {
  const name = state.selected;
  const id = name ? state.inFlight.get(name) : undefined;
  if (!name || !id) return;
  showError("chat-error");
  try {
    await api().cancel(NS, name, id);
  } catch (error) {
    showError("chat-error", error);
  }
}

/** The outcome a refused request's error carries (`details.result.outcome`), else "failed". */
function failedOutcome(error: unknown): string {
  // Cancelled (from this page's Cancel, or another client's): the stream ends with CANCELLED.
  if (error instanceof ClientError && error.code === "CANCELLED") return "cancelled";
  const result = error instanceof ClientError ? error.details?.result : undefined;
  const outcome = (result as { outcome?: unknown } | undefined)?.outcome;
  return typeof outcome === "string" ? outcome : "failed";
}

// ---- live events ----

async function follow(client: AgentSessionsClient): Promise<void> {
  const controller = new AbortController();
  state.events = controller;
  let delay = 1000;
  while (!controller.signal.aborted) {
    try {
      // The client reconnects a dropped stream itself (with Last-Event-ID); an answered error
      // (a refused token, a server starting up) ends it and this loop tries again.
      const events = client.events({
        signal: controller.signal,
        maxReconnects: Number.POSITIVE_INFINITY,
        reconnectDelayMs: 1000,
        onOpen: () => {
          setLive(true);
          delay = 1000;
          // Whatever happened while not connected: look once.
          void refresh();
        },
        onReconnect: () => setLive(false),
      });
      for await (const message of events) {
        // A transition of this namespace's sessions (each frame names its namespace) changes the list.
        if (
          message.kind === "frame" &&
          message.frame.type === "status" &&
          (message.frame.namespace === undefined || message.frame.namespace === NS)
        )
          refreshSoon();
        if (message.kind === "frame" && message.frame.type === "tool") noteToolCall(message.frame);
        if (message.kind === "frame") noteEvent(message.frame);
      }
    } catch (error) {
      if (refused(error)) return disconnect("the token was refused");
    }
    if (controller.signal.aborted) return;
    setLive(false);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}

/** An MCP tool call of a session's events, shown in its detail (others are the agent's own tools, in its transcript). */
function noteToolCall(frame: { session_id: string; ts: string; payload: Record<string, unknown> }): void {
  const p = frame.payload;
  if (p.source !== "mcp") return;
  const rows = state.toolCalls.get(frame.session_id) ?? [];
  rows.unshift({
    server: String(p.server ?? ""),
    tool: String(p.tool ?? ""),
    outcome: String(p.outcome ?? ""),
    durationMs: Number(p.duration_ms ?? 0),
    at: frame.ts,
  });
  state.toolCalls.set(frame.session_id, rows.slice(0, TOOL_CALLS_KEPT));
  const selected = state.sessions.find((x) => x.metadata.name === state.selected);
  if (selected?.status.sessionId === frame.session_id) renderToolCalls(frame.session_id);
}

/** Events kept per agent session for its pane (the newest first). */
const EVENTS_KEPT = 100;

/**
 * A session's events as the stream brings them, for its Events pane: status transitions, the
 * server's events (PhaseChanged, RequestFinished, Snapshotted, Expired…), tool calls and errors;
 * not the reply text (deltas and messages are the transcript's).
 */
function noteEvent(frame: {
  session_id: string;
  ts: string;
  type: string;
  payload: Record<string, unknown>;
}): void {
  const p = frame.payload;
  const text =
    frame.type === "status"
      ? `status ${String(p.state ?? "")}${p.reason ? ` (${String(p.reason)})` : ""}`
      : frame.type === "log" && typeof p.event === "string"
        ? `${p.event}${eventDetail(p)}`
        : frame.type === "tool"
          ? `tool ${p.server ? `${String(p.server)}/` : ""}${String(p.tool ?? p.name ?? "")} ${String(p.outcome ?? p.phase ?? "")}`.trim()
          : frame.type === "error"
            ? `error ${String(p.message ?? p.error ?? "")}`
            : undefined;
  if (text === undefined) return;
  const rows = state.eventLog.get(frame.session_id) ?? [];
  rows.unshift({ at: frame.ts, text });
  state.eventLog.set(frame.session_id, rows.slice(0, EVENTS_KEPT));
  const selected = state.sessions.find((x) => x.metadata.name === state.selected);
  if (selected?.status.sessionId === frame.session_id) renderEvents(frame.session_id);
}

/** The parts of a server event worth a line: phase, reason, outcome, request, snapshot. */
function eventDetail(p: Record<string, unknown>): string {
  const parts = ["phase", "reason", "outcome", "request_id", "snapshot"]
    .filter((k) => typeof p[k] === "string" && p[k] !== "")
    .map((k) => `${k}=${String(p[k])}`);
  return parts.length ? ` ${parts.join(" ")}` : "";
}

function renderEvents(sessionId: string | undefined): void {
  const rows = sessionId === undefined ? [] : (state.eventLog.get(sessionId) ?? []);
  $("no-events").hidden = rows.length > 0;
  $("sel-events").replaceChildren(
    ...rows.map((r) =>
      el(
        "li",
        { dataset: { event: r.text.split(" ")[0] ?? "" } },
        el("span", { className: "muted", textContent: `${new Date(r.at).toLocaleTimeString()} ` }),
        r.text,
      ),
    ),
  );
}

/** The last lines the runner saw of the session's processes (`GET …/logs`), secrets redacted. */
async function loadLogs(name: string): Promise<void> {
  showError("logs-error");
  try {
    const { lines, truncated } = await api().sessionLogs(NS, name, { tailLines: 200 });
    if (state.selected !== name) return;
    $("sel-logs").textContent = lines.length
      ? (truncated ? "(older lines are gone)\n" : "") +
        lines.map((l) => `${l.ts.slice(11, 19)} ${l.source}/${l.stream}: ${l.line}`).join("\n")
      : "(no lines yet)";
  } catch (error) {
    if (state.selected === name) showError("logs-error", error);
  }
}

function renderToolCalls(sessionId: string | undefined): void {
  const rows = sessionId === undefined ? [] : (state.toolCalls.get(sessionId) ?? []);
  $("tool-calls").replaceChildren(
    ...rows.map((r) =>
      el(
        "tr",
        {},
        el("td", { textContent: new Date(r.at).toLocaleTimeString() }),
        el("td", { textContent: r.server }),
        el("td", { textContent: r.tool }),
        el("td", { textContent: r.outcome, dataset: { field: "outcome" } }),
        el("td", { textContent: `${Math.round(r.durationMs)} ms` }),
      ),
    ),
  );
}

function setLive(on: boolean): void {
  $("live").className = `live ${on ? "on" : "off"}`;
  $("live").textContent = on ? "events: live" : "events: reconnecting";
}

// ---- token ----

async function connect(): Promise<void> {
  const client = new AgentSessionsClient({ baseUrl: window.location.origin, token: state.token });
  let access: ReturnType<typeof accessOf>;
  let scopes: string[];
  try {
    scopes = (await client.whoami()).scopes;
    access = accessOf(scopes);
  } catch (error) {
    return disconnect(refused(error) ? "the token was refused" : errorText(error));
  }
  state.client = client;
  NS = access.namespace;
  state.role = access.role;
  state.admin = scopes.includes("admin");
  state.roles = namespacesOf(scopes);
  state.only = access.only;
  if (state.only) state.selected = state.only;
  $("namespace").textContent = NS;
  $("create").hidden = state.role !== "edit";
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $("token-form").hidden = true;
  $("forget").hidden = false;
  $("app").hidden = false;
  $("login").hidden = true;
  setupNamespaces();
  $("nav").hidden = state.only !== undefined;
  $("nav-runners").hidden = !state.admin;
  showError("global-error");
  const choices =
    state.role === "edit" ? loadChoices().catch((e) => showError("create-error", e)) : undefined;
  await Promise.all([refresh(), choices]);
  void follow(client);
  showPage();
}

// ---- pages and namespaces ----

const PAGES = ["sessions", "agents", "runtimes", "webhooks", "runners"] as const;
type Page = (typeof PAGES)[number];

function pageContext(): PageContext | undefined {
  return state.client
    ? { client: state.client, namespace: NS, role: state.role, admin: state.admin }
    : undefined;
}

/** Shows the page the URL's fragment names (`#agents`…; sessions otherwise) and loads it. */
function showPage(): void {
  if (!state.client) return;
  const wanted = window.location.hash.slice(1) as Page;
  const page: Page = PAGES.includes(wanted) && state.only === undefined ? wanted : "sessions";
  $("app").hidden = page !== "sessions";
  for (const p of PAGES.slice(1)) $(`page-${p}`).hidden = p !== page;
  for (const a of $("nav").querySelectorAll("a")) a.classList.toggle("current", a.dataset.page === page);
  const ctx = pageContext();
  if (!ctx) return;
  if (page === "agents") void showAgents(ctx);
  else if (page === "runtimes") void showRuntimes(ctx);
  else if (page === "webhooks") void showWebhooks(ctx);
  else if (page === "runners") void showRunners(ctx);
}

/**
 * The namespace switcher: an admin may type any namespace (the ones seen are offered); a token
 * scoped to several namespaces picks one of them; a token of one namespace sees its name only.
 */
function setupNamespaces(): void {
  const select = $("namespace-select") as HTMLSelectElement;
  const input = $("namespace-input") as HTMLInputElement;
  const several = [...state.roles.keys()].filter((ns) => state.roles.get(ns) !== "chat");
  select.hidden = state.admin || several.length < 2;
  input.hidden = !state.admin;
  $("namespace").hidden = !select.hidden || !input.hidden;
  if (!select.hidden) {
    select.replaceChildren(...several.map((ns) => el("option", { value: ns, textContent: ns })));
    select.value = NS;
  }
  if (!input.hidden) input.value = NS;
}

function switchNamespace(ns: string): void {
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(ns) || ns === NS || ns.length > 63) return;
  NS = ns;
  state.role = state.admin ? "edit" : (state.roles.get(ns) ?? "view");
  state.selected = undefined;
  state.sessions = [];
  state.snapshots = [];
  state.ws = { session: undefined, path: "", phase: undefined };
  $("namespace").textContent = NS;
  $("create").hidden = state.role !== "edit";
  if (state.role === "edit") void loadChoices().catch((e) => showError("create-error", e));
  void refresh();
  showPage();
}

$("namespace-select").addEventListener("change", (e) =>
  switchNamespace((e.target as HTMLSelectElement).value),
);
$("namespace-input").addEventListener("change", (e) =>
  switchNamespace((e.target as HTMLInputElement).value.trim()),
);
window.addEventListener("hashchange", () => showPage());
wireAgentForm(pageContext);
wireWebhookForm(pageContext);

function disconnect(why?: string): void {
  state.events?.abort();
  state.events = undefined;
  state.client = undefined;
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  $("token-form").hidden = false;
  $("forget").hidden = true;
  $("app").hidden = true;
  for (const p of PAGES.slice(1)) $(`page-${p}`).hidden = true;
  $("nav").hidden = true;
  $("login").hidden = false;
  $("live").className = "live off";
  $("live").textContent = "events: not connected";
  showError("global-error", why === undefined ? undefined : new Error(why));
}

form("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("token") as HTMLInputElement;
  state.token = input.value.trim();
  input.value = "";
  if (state.token) void connect();
});
$("forget").addEventListener("click", () => disconnect());
form("create-form").addEventListener("submit", (event) => void create(event));
form("chat-form").addEventListener("submit", (event) => void send(event));
// Enter sends, Shift+Enter starts a new line.
field<HTMLTextAreaElement>(form("chat-form"), "input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form("chat-form").requestSubmit();
  }
});
$("cancel").addEventListener("click", () => void cancelRequest());
$("logs-refresh").addEventListener("click", () => {
  if (state.selected) void loadLogs(state.selected);
});
form("snapshot-form").addEventListener("submit", (event) => void takeSnapshot(event));
$("ws-refresh").addEventListener("click", () => void listWorkspace());
$("ws-up").addEventListener(
  "click",
  () => void listWorkspace(state.ws.path.split("/").slice(0, -1).join("/")),
);
$("ws-diff-button").addEventListener("click", () => void viewDiff());
$("namespace").textContent = NS;
// A token handed over in the URL fragment is taken and the fragment cleared (not kept in history);
// one that differs from the token this tab already uses replaces it only if the user confirms.
const handed = new URLSearchParams(window.location.hash.slice(1)).get("token");
if (handed) {
  state.token = tokenToUse(state.token, handed, () =>
    window.confirm(
      "This link carries a different access token from the one this page is using. Replace it? (Cancel keeps the current one.)",
    ),
  );
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
}
if (state.token) void connect();
