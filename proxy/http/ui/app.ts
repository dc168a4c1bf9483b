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
import type { WorkspaceEntry } from "../../../contracts/workspace-files.ts";
import { tokenToUse } from "./token-handover.ts";

const TOKEN_KEY = "agent-sessions.token";
let NS = "default";

type Role = "edit" | "view" | "chat";
type Message = { who: "user" | "assistant"; text: string; done: boolean; failed?: boolean };
type Sent = { id: string; input: string; outcome: string; usage: Usage | undefined };

const $ = (id: string): HTMLElement => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the page has no #${id}`);
  return node;
};
const form = (id: string) => $(id) as HTMLFormElement;
const field = <T extends HTMLInputElement | HTMLSelectElement = HTMLInputElement>(
  f: HTMLFormElement,
  name: string,
) => f.elements.namedItem(name) as T;

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
  busy: new Set<string>(),
  events: undefined as AbortController | undefined,
  /** What the token may do here: "edit" (create, stop, delete, chat), "view" (read), "chat" (its session). */
  role: "edit" as Role,
  /** With a session token: the one session it opens. */
  only: undefined as string | undefined,
  /** The workspace pane: whose workspace it shows and the directory listed ("" is /workspace). */
  ws: { session: undefined as string | undefined, path: "", phase: undefined as string | undefined },
};

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

function errorText(error: unknown): string {
  if (error instanceof ClientError) return `${error.code}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

type Props<K extends keyof HTMLElementTagNameMap> = Partial<Omit<HTMLElementTagNameMap[K], "dataset">> & {
  dataset?: Record<string, string>;
};

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props<K> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  const { dataset, ...rest } = props;
  if (dataset) Object.assign(node.dataset, dataset);
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) Object.assign(node, { [k]: v });
  node.append(...children);
  return node;
}

function showError(where: string, error?: unknown): void {
  $(where).textContent = error === undefined ? "" : errorText(error);
}

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
  // Running: pause or stop; paused: wake or stop; stopped: resume.
  const toggles =
    desired === "stopped"
      ? [button("Resume", "running")]
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
      el("td", { textContent: s.spec.agentRef }),
      el("td", { textContent: s.spec.runtimeRef }),
      el("td", { textContent: s.spec.desiredState }),
      el(
        "td",
        { title: readyCondition(s)?.message ?? "" },
        phaseBadge(s),
        " ",
        el("span", { className: "tier", textContent: tierOf(s), dataset: { field: "tier" } }),
      ),
      el("td", { textContent: String(s.status.requestCount), dataset: { field: "requests" } }),
      el("td", { className: "actions" }, ...actions(name, s, busy)),
    );
    body.append(row);
  }
  $("empty").hidden = state.sessions.length > 0;
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
  field(form("chat-form"), "input").focus();
}

/**
 * The session's declared ports (issue 40), each with a button minting a 15-minute token of that
 * port alone (`POST …/porttokens`): shown once with the port's URL, for a preview (`Authorization:
 * Bearer …`). The UI's own token never leaves this page.
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
      const mint = el("button", { type: "button", textContent: "Preview token (15m)" });
      mint.addEventListener("click", () => {
        showError("ports-error");
        api()
          .createPortToken(NS, name, p.port, { ttl: "15m" })
          .then((created) =>
            shown.replaceChildren(
              el("code", { textContent: created.url }),
              el("br", {}),
              el("code", { textContent: created.token, title: `expires ${created.expiresAt ?? "never"}` }),
            ),
          )
          .catch((error: unknown) => showError("ports-error", error));
      });
      shown.replaceChildren(mint);
      return [el("dt", { textContent: `${p.name} (${p.port})` }), shown];
    }),
  );
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
        el("span", { className: "text", textContent: m.text }),
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
  renderTranscript(name);
  if (state.ws.session !== name) {
    state.ws = { session: name, path: "", phase: s.status.phase };
    closeView();
    void listWorkspace();
  } else if (state.ws.phase !== s.status.phase) {
    // A workspace made or brought back (Ready) is listed again without a click.
    state.ws.phase = s.status.phase;
    if (s.status.phase === "Ready") void listWorkspace();
  }
  renderSnapshots(s);
  const sendButton = form("chat-form").querySelector("button");
  if (sendButton) sendButton.disabled = s.status.phase !== "Ready";
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
    state.transcripts.delete(session);
  });
}

async function deleteSnapshot(snapshot: string): Promise<void> {
  if (!window.confirm(`Delete snapshot ${snapshot}? Its storage is freed.`)) return;
  await snapshotAction(state.selected ?? "", () => api().delete("sessionsnapshots", NS, snapshot));
}

// ---- workspace pane: the tree through the files API, a file's text, the diff ----

const joinPath = (dir: string, name: string) => (dir ? `${dir}/${name}` : name);

/** A stream's text, cut at VIEW_MAX_BYTES (the rest is not read). */
async function readText(stream: ReadableStream<Uint8Array>): Promise<{ text: string; cut: boolean }> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { text: text + decoder.decode(), cut: false };
    bytes += value.byteLength;
    text += decoder.decode(value, { stream: true });
    if (bytes > VIEW_MAX_BYTES) {
      await reader.cancel();
      return { text: text.slice(0, VIEW_MAX_BYTES), cut: true };
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

/** The latest listing asked for: an answer to an earlier one (a refresh overtaken by a click) is dropped. */
let listingSeq = 0;

/** Lists the pane's directory of the selected session's workspace. */
async function listWorkspace(path = state.ws.path): Promise<void> {
  const name = state.ws.session;
  if (!name) return;
  const seq = ++listingSeq;
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
  const inputField = field(form("chat-form"), "input");
  const input = inputField.value;
  if (!name || !input.trim()) return;
  inputField.value = "";
  showError("chat-error");
  const id = `ui-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
  const transcript = transcriptOf(name);
  transcript.push({ who: "user", text: input, done: true });
  const reply: Message = { who: "assistant", text: "", done: false, failed: false };
  transcript.push(reply);
  const entry: Sent = { id, input, outcome: "in flight", usage: undefined };
  const history = state.history.get(name) ?? [];
  history.unshift(entry);
  state.history.set(name, history);
  renderDetail();
  try {
    for await (const message of api().sendStreaming(NS, name, input, { id })) {
      if (message.type === "delta") {
        reply.text += message.text;
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
  }
  renderDetail();
  await refresh();
}

/** The outcome a refused request's error carries (`details.result.outcome`), else "failed". */
function failedOutcome(error: unknown): string {
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
        if (message.kind === "frame" && message.frame.type === "status") refreshSoon();
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

function setLive(on: boolean): void {
  $("live").className = `live ${on ? "on" : "off"}`;
  $("live").textContent = on ? "events: live" : "events: reconnecting";
}

// ---- token ----

async function connect(): Promise<void> {
  const client = new AgentSessionsClient({ baseUrl: window.location.origin, token: state.token });
  let access: ReturnType<typeof accessOf>;
  try {
    access = accessOf((await client.whoami()).scopes);
  } catch (error) {
    return disconnect(refused(error) ? "the token was refused" : errorText(error));
  }
  state.client = client;
  NS = access.namespace;
  state.role = access.role;
  state.only = access.only;
  if (state.only) state.selected = state.only;
  $("namespace").textContent = NS;
  $("create").hidden = state.role !== "edit";
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $("token-form").hidden = true;
  $("forget").hidden = false;
  $("app").hidden = false;
  showError("global-error");
  const choices =
    state.role === "edit" ? loadChoices().catch((e) => showError("create-error", e)) : undefined;
  await Promise.all([refresh(), choices]);
  void follow(client);
}

function disconnect(why?: string): void {
  state.events?.abort();
  state.events = undefined;
  state.client = undefined;
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  $("token-form").hidden = false;
  $("forget").hidden = true;
  $("app").hidden = true;
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
