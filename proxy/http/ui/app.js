// The agent-sessions web UI: plain DOM, the public API only, the token in sessionStorage.
// EventSource cannot send an Authorization header, so server-sent events are read with fetch.
//
// Any token works (README "Scoped tokens"): `admin`, `namespace:<ns>:edit|view`, or a
// `session:<ns>/<name>:chat` token a portal backend minted for this browser, which it may hand
// over in the URL fragment (`/ui/#token=…`: a fragment is never sent to a server or logged).
// GET /v1/whoami says what the token may do; the page shows only that.

const API = "agent-sessions.dev/v1alpha1";
const TOKEN_KEY = "agent-sessions.token";
let NS = "default";
let BASE = `/v1/namespaces/${NS}`;

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) ?? "",
  sessions: [],
  selected: undefined,
  /** Per session: the requests sent from this page, newest first. */
  history: new Map(),
  /** Per session: the transcript shown in the chat pane. */
  transcripts: new Map(),
  busy: new Set(),
  events: undefined,
  /** What the token may do here: "edit" (create, stop, delete, chat), "view" (read), "chat" (its session). */
  role: "edit",
  /** With a session token: the one session it opens. */
  only: undefined,
};

/** The namespace, role and session the token's scopes give this page (the widest one wins). */
function accessOf(scopes) {
  if (scopes.includes("admin")) return { namespace: "default", role: "edit", only: undefined };
  const parsed = scopes.map((s) => s.split(":"));
  const edit = parsed.find((p) => p[0] === "namespace" && p[2] === "edit");
  if (edit) return { namespace: edit[1], role: "edit", only: undefined };
  const view = parsed.find((p) => p[0] === "namespace" && p[2] === "view");
  if (view) return { namespace: view[1], role: "view", only: undefined };
  const session = parsed.find((p) => p[0] === "session");
  if (session) {
    const [namespace, name] = session[1].split("/");
    return { namespace, role: "chat", only: name };
  }
  return { namespace: "default", role: "view", only: undefined };
}

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ? `${body.code ?? status}: ${body.message}` : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = { message: text };
  }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

/** Server-sent events of a fetch response body, as {event, id, data} objects. */
async function* readSse(body, signal) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    while (!signal?.aborted) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const message = { event: "message", id: undefined, data: [] };
        for (const line of block.split("\n")) {
          if (line === "" || line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") message.event = value;
          else if (field === "id") message.id = value;
          else if (field === "data") message.data.push(value);
        }
        if (message.data.length === 0) continue;
        let data = message.data.join("\n");
        try {
          data = JSON.parse(data);
        } catch {
          // not JSON: keep the text
        }
        yield { event: message.event, id: message.id, data };
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined) node[k] = v;
  }
  for (const child of children) node.append(child);
  return node;
}

function showError(where, error) {
  $(where).textContent = error ? String(error.message ?? error) : "";
}

// ---- sessions ----

let refreshing;
let refreshAgain = false;
async function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return refreshing;
  }
  refreshing = (async () => {
    do {
      refreshAgain = false;
      try {
        // A session token reads its one session; the namespace list is not its to read.
        // Otherwise page after page (`metadata.continue`), already in name order.
        const items = [];
        if (state.only) items.push(await api("GET", `${BASE}/harnesssessions/${state.only}`));
        else {
          let next;
          do {
            const page = await api(
              "GET",
              `${BASE}/harnesssessions${next ? `?continue=${encodeURIComponent(next)}` : ""}`,
            );
            items.push(...page.items);
            next = page.metadata?.continue;
          } while (next);
        }
        state.sessions = items;
        showError("global-error");
      } catch (error) {
        if (error.status === 401) return disconnect("the token was refused");
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
function refreshSoon() {
  void refresh();
  setTimeout(refresh, 400);
  setTimeout(refresh, 1500);
}

const settled = (s) =>
  s.metadata.deletionTimestamp === undefined &&
  ((s.spec.desiredState === "running" && (s.status.phase === "Ready" || s.status.phase === "Failed")) ||
    (s.spec.desiredState === "stopped" && s.status.phase === "Stopped"));

// Live updates come from /v1/events; while a session is still on its way this also looks every
// second, and otherwise every 15 s as a safety net.
let lastPoll = 0;
setInterval(() => {
  if (!state.token || $("app").hidden) return;
  const moving = state.sessions.some((s) => !settled(s) || s.status.activeRequests > 0);
  if (moving || Date.now() - lastPoll > 15_000) {
    lastPoll = Date.now();
    void refresh();
  }
}, 1000);

function phaseBadge(session) {
  const phase = session.metadata.deletionTimestamp ? "Deleting" : session.status.phase;
  return el("span", { className: `phase phase-${phase}`, textContent: phase, dataset: { field: "phase" } });
}

function readyCondition(session) {
  return session.status.conditions.find((c) => c.type === "Ready");
}

function render() {
  const body = $("sessions");
  body.replaceChildren();
  for (const s of state.sessions) {
    const name = s.metadata.name;
    const busy = state.busy.has(name) || s.metadata.deletionTimestamp !== undefined;
    const running = s.spec.desiredState === "running";
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
      el("td", { title: readyCondition(s)?.message ?? "" }, phaseBadge(s)),
      el("td", { textContent: String(s.status.requestCount), dataset: { field: "requests" } }),
      el(
        "td",
        { className: "actions" },
        state.role !== "edit"
          ? ""
          : running
            ? el("button", {
                type: "button",
                textContent: "Stop",
                disabled: busy,
                onclick: () => setDesired(name, "stopped"),
              })
            : el("button", {
                type: "button",
                textContent: "Resume",
                disabled: busy,
                onclick: () => setDesired(name, "running"),
              }),
        state.role !== "edit" ? "" : " ",
        state.role !== "edit"
          ? ""
          : el("button", {
              type: "button",
              className: "danger",
              textContent: "Delete",
              disabled: busy,
              onclick: () => remove(name),
            }),
      ),
    );
    body.append(row);
  }
  $("empty").hidden = state.sessions.length > 0;
  renderDetail();
}

async function setDesired(name, desiredState) {
  state.busy.add(name);
  render();
  try {
    await api("PATCH", `${BASE}/harnesssessions/${name}`, { spec: { desiredState } });
    showError("global-error");
  } catch (error) {
    showError("global-error", error);
  } finally {
    state.busy.delete(name);
  }
  await refresh();
}

async function remove(name) {
  if (!window.confirm(`Delete session ${name}? Its workspace and volume are destroyed.`)) return;
  state.busy.add(name);
  const s = state.sessions.find((x) => x.metadata.name === name);
  if (s) s.metadata.deletionTimestamp = new Date().toISOString();
  render();
  // DELETE answers once the workspace is torn down; the list shows Deleting meanwhile.
  const polling = setInterval(refresh, 1000);
  try {
    await api("DELETE", `${BASE}/harnesssessions/${name}`);
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

async function loadChoices() {
  const [agents, runtimes] = await Promise.all([
    api("GET", `${BASE}/agents`),
    api("GET", `${BASE}/agentruntimes`),
  ]);
  const agentSelect = $("create-form").elements.agent;
  const runtimeSelect = $("create-form").elements.runtime;
  agentSelect.replaceChildren(
    ...agents.items.map((a) =>
      el("option", {
        value: a.metadata.name,
        textContent: a.metadata.name,
        dataset: { runtime: a.spec.runtimeRef },
      }),
    ),
  );
  runtimeSelect.replaceChildren(
    ...runtimes.items.map((r) => el("option", { value: r.metadata.name, textContent: r.metadata.name })),
  );
  const follow = () => {
    const runtime = agentSelect.selectedOptions[0]?.dataset.runtime;
    if (runtime) runtimeSelect.value = runtime;
  };
  agentSelect.onchange = follow;
  follow();
}

async function create(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.name.value.trim();
  showError("create-error");
  try {
    await api("PUT", `${BASE}/harnesssessions/${name}`, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: {
        agentRef: form.elements.agent.value,
        runtimeRef: form.elements.runtime.value,
        desiredState: "running",
      },
    });
    form.elements.name.value = "";
    state.selected = name;
  } catch (error) {
    showError("create-error", error);
  }
  await refresh();
}

// ---- chat pane ----

function select(name) {
  state.selected = name;
  showError("chat-error");
  render();
  $("chat-form").elements.input.focus();
}

function transcriptOf(name) {
  let t = state.transcripts.get(name);
  if (!t) {
    t = [];
    state.transcripts.set(name, t);
  }
  return t;
}

function usageText(usage) {
  if (!usage) return "";
  if (usage === "unavailable") return "unavailable";
  return `${usage.input_tokens ?? usage.inputTokens}/${usage.output_tokens ?? usage.outputTokens}`;
}

function renderTranscript(name) {
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

function renderDetail() {
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
    ["total tokens (in/out)", `${u.inputTokens}/${u.outputTokens}`],
    ["usage reported / unavailable", `${u.reportedRequests} / ${u.unavailableRequests}`],
    ["last activity", st.lastActivityTime ? new Date(st.lastActivityTime).toLocaleString() : "—"],
  ];
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
  $("chat-form").querySelector("button").disabled = s.status.phase !== "Ready";
}

async function send(event) {
  event.preventDefault();
  const name = state.selected;
  const input = event.target.elements.input.value;
  if (!name || !input.trim()) return;
  event.target.elements.input.value = "";
  showError("chat-error");
  const id = `ui-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
  const transcript = transcriptOf(name);
  transcript.push({ who: "user", text: input, done: true });
  const reply = { who: "assistant", text: "", done: false, failed: false };
  transcript.push(reply);
  const entry = { id, input, outcome: "in flight", usage: undefined };
  const history = state.history.get(name) ?? [];
  history.unshift(entry);
  state.history.set(name, history);
  renderDetail();
  try {
    const res = await fetch(`${BASE}/harnesssessions/${name}/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${state.token}`, "content-type": "application/json" },
      body: JSON.stringify({ input, stream: true, id }),
    });
    if (!res.ok || !res.body) {
      const body = await res.json().catch(() => ({}));
      throw new ApiError(res.status, body);
    }
    for await (const message of readSse(res.body)) {
      if (message.event === "delta") {
        reply.text += message.data.text ?? "";
      } else if (message.event === "result") {
        const result = message.data.result ?? {};
        entry.outcome = result.outcome ?? "unknown";
        entry.usage = result.usage;
        if (!reply.text && typeof result.output === "string") reply.text = result.output;
        if (result.outcome !== "succeeded") {
          reply.failed = true;
          if (result.error) reply.text += `\n[${result.outcome}: ${result.error.message ?? result.error}]`;
        }
      } else if (message.event === "error") {
        throw new ApiError(res.status, message.data);
      }
      if (state.selected === name) renderTranscript(name);
    }
    if (entry.outcome === "in flight") entry.outcome = "ended without a result";
  } catch (error) {
    reply.failed = true;
    if (!reply.text) reply.text = String(error.message ?? error);
    if (entry.outcome === "in flight") entry.outcome = error.body?.details?.result?.outcome ?? "failed";
    showError("chat-error", error);
  } finally {
    reply.done = true;
  }
  renderDetail();
  await refresh();
}

// ---- live events ----

async function follow() {
  const controller = new AbortController();
  state.events = controller;
  let delay = 1000;
  while (!controller.signal.aborted) {
    try {
      const res = await fetch("/v1/events", {
        headers: { authorization: `Bearer ${state.token}` },
        signal: controller.signal,
      });
      if (res.status === 401) return disconnect("the token was refused");
      if (!res.ok || !res.body) throw new ApiError(res.status, {});
      setLive(true);
      delay = 1000;
      // Whatever happened while not connected: look once.
      void refresh();
      for await (const message of readSse(res.body, controller.signal)) {
        if (message.data?.type === "status") refreshSoon();
      }
    } catch {
      // reconnect below
    }
    if (controller.signal.aborted) return;
    setLive(false);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}

function setLive(on) {
  $("live").className = `live ${on ? "on" : "off"}`;
  $("live").textContent = on ? "events: live" : "events: reconnecting";
}

// ---- token ----

async function connect() {
  let access;
  try {
    access = accessOf((await api("GET", "/v1/whoami")).scopes);
  } catch (error) {
    return disconnect(error.status === 401 ? "the token was refused" : String(error.message ?? error));
  }
  NS = access.namespace;
  BASE = `/v1/namespaces/${NS}`;
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
  void follow();
}

function disconnect(why) {
  state.events?.abort();
  state.events = undefined;
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  $("token-form").hidden = false;
  $("forget").hidden = true;
  $("app").hidden = true;
  $("live").className = "live off";
  $("live").textContent = "events: not connected";
  showError("global-error", why ? new Error(why) : undefined);
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("token");
  state.token = input.value.trim();
  input.value = "";
  if (state.token) void connect();
});
$("forget").addEventListener("click", () => disconnect());
$("create-form").addEventListener("submit", create);
$("chat-form").addEventListener("submit", send);
$("namespace").textContent = NS;
// A token handed over in the URL fragment is taken and the fragment cleared (not kept in history).
const handed = new URLSearchParams(window.location.hash.slice(1)).get("token");
if (handed) {
  state.token = handed;
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
}
if (state.token) void connect();
