// The web UI's pages around sessions: Agents (list; create and edit with credentials write-only),
// AgentRuntimes (what each image is, whether it is approved), Webhooks (create with the secret
// shown once, delete, recent deliveries) and runners (admin only: where sessions run, drain and
// undrain). Each page reads the public API through the typed client.

import type { AgentSessionsClient } from "../../../client/index.ts";
import type { Agent, AgentInput, AgentRuntime } from "../../../contracts/resources.ts";
import type { RunnerInfo } from "../../../contracts/runners.ts";
import type { Webhook } from "../../../contracts/webhook.ts";
import { $, el, field, form, showError } from "./dom.ts";

export type PageContext = {
  client: AgentSessionsClient;
  namespace: string;
  /** What the token may do in this namespace. */
  role: "edit" | "view" | "chat";
  admin: boolean;
};

/** A credential as PUT takes it: a new value, a server variable, or `valueSet` (keep the stored one). */
type CredentialWrite = { name: string; value?: string; secretRef?: { env: string }; valueSet?: true };

/** A credential as GET shows it: the value is never returned, `valueSet` says one is stored. */
type CredentialView = { name: string; valueSet?: true; secretRef?: { env: string } };

// ---- Agents ----

let agents: Agent[] = [];
let runtimes: AgentRuntime[] = [];
/** The Agent the form edits; undefined: a new one. */
let editing: Agent | undefined;

export async function showAgents(ctx: PageContext): Promise<void> {
  showError("agents-error");
  try {
    [agents, runtimes] = await Promise.all([
      ctx.client.listAll("agents", ctx.namespace),
      ctx.client.listAll("agentruntimes", ctx.namespace),
    ]);
  } catch (error) {
    showError("agents-error", error);
  }
  $("agents-new").hidden = ctx.role !== "edit";
  $("no-agents").hidden = agents.length > 0;
  $("agents").replaceChildren(
    ...agents.map((a) => {
      const creds = (a.spec.credentials as CredentialView[]).map((c) =>
        c.secretRef ? `${c.name} (from $${c.secretRef.env})` : `${c.name} (set)`,
      );
      return el(
        "tr",
        { dataset: { agent: a.metadata.name } },
        el("td", { className: "name", textContent: a.metadata.name }),
        el("td", { textContent: a.spec.runtimeRef }),
        el("td", {
          className: "wide",
          textContent: a.spec.model ? `${a.spec.model.name} at ${a.spec.model.baseUrl}` : "—",
        }),
        el("td", { textContent: creds.join(", ") || "—", dataset: { field: "credentials" } }),
        el("td", {
          className: "wide",
          textContent: a.spec.egress.map((r) => `${r.cidr}:${r.port}`).join(", ") || "—",
        }),
        el(
          "td",
          { className: "actions" },
          ...(ctx.role === "edit"
            ? [el("button", { type: "button", textContent: "Edit", onclick: () => openAgentForm(ctx, a) })]
            : []),
        ),
      );
    }),
  );
}

/** Fills the Agent form from `agent` (or empty for a new one) and shows it. */
export function openAgentForm(ctx: PageContext, agent?: Agent): void {
  editing = agent;
  const f = form("agent-form");
  f.hidden = false;
  showError("agent-form-error");
  $("agent-form-title").textContent = agent ? `Edit Agent ${agent.metadata.name}` : "New Agent";
  const name = field(f, "name");
  name.value = agent?.metadata.name ?? "";
  name.disabled = agent !== undefined;
  const runtime = field<HTMLSelectElement>(f, "runtime");
  runtime.replaceChildren(
    ...runtimes.map((r) => el("option", { value: r.metadata.name, textContent: r.metadata.name })),
  );
  runtime.value = agent?.spec.runtimeRef ?? runtimes[0]?.metadata.name ?? "";
  field(f, "baseUrl").value = agent?.spec.model?.baseUrl ?? "";
  field(f, "model").value = agent?.spec.model?.name ?? "";
  field<HTMLTextAreaElement>(f, "egress").value = (agent?.spec.egress ?? [])
    .map((r) => `${r.cidr}:${r.port}`)
    .join("\n");
  $("agent-credentials").replaceChildren(
    ...((agent?.spec.credentials as CredentialView[] | undefined) ?? []).map((c) => credentialRow(c)),
  );
  if (!agent) $("agent-credentials").append(credentialRow());
  (agent ? field(f, "baseUrl") : name).focus();
  void ctx;
}

/** One credential's row: its name, and a value that is never shown (empty keeps the stored one). */
function credentialRow(stored?: CredentialView): HTMLDivElement {
  const keeps = stored !== undefined && stored.secretRef === undefined;
  return el(
    "div",
    { className: "cred", dataset: { credential: stored?.name ?? "" } },
    el("input", {
      name: "cred-name",
      value: stored?.name ?? "",
      placeholder: "MODEL_API_KEY",
      pattern: "[A-Z_][A-Z0-9_]*",
      title: "an environment variable name (A-Z, 0-9, _)",
      size: 18,
    }),
    el("input", {
      name: "cred-value",
      type: "password",
      autocomplete: "new-password",
      placeholder: stored?.secretRef
        ? `from the server's $${stored.secretRef.env}: type a value to replace it`
        : keeps
          ? "stored: leave empty to keep it"
          : "value (write-only)",
      size: 30,
      dataset: { keeps: String(keeps), ...(stored?.secretRef ? { env: stored.secretRef.env } : {}) },
    }),
    el("button", {
      type: "button",
      textContent: "Remove",
      onclick: (e) => (e.currentTarget as HTMLElement).parentElement?.remove(),
    }),
  );
}

/** The Agent the form describes; the fields it does not show (limits, skills, …) are kept. */
function agentFromForm(ctx: PageContext): AgentInput {
  const f = form("agent-form");
  const credentials = [...$("agent-credentials").querySelectorAll<HTMLDivElement>(".cred")].flatMap(
    (row): CredentialWrite[] => {
      const name = (row.querySelector('[name="cred-name"]') as HTMLInputElement).value.trim();
      const input = row.querySelector('[name="cred-value"]') as HTMLInputElement;
      const value = input.value;
      if (!name) return [];
      if (value) return [{ name, value }];
      if (input.dataset.env) return [{ name, secretRef: { env: input.dataset.env } }];
      if (input.dataset.keeps === "true" && row.dataset.credential === name)
        return [{ name, valueSet: true as const }];
      throw new Error(`credential ${name} needs a value`);
    },
  );
  const egress = field<HTMLTextAreaElement>(f, "egress")
    .value.split(/[\n,]/)
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => {
      const [cidr = "", port = ""] = line.split(":");
      if (!/^\d+$/.test(port))
        throw new Error(`egress "${line}": write it as cidr:port, e.g. 10.0.0.5/32:443`);
      return { cidr, port: Number(port) };
    });
  const baseUrl = field(f, "baseUrl").value.trim();
  const model = field(f, "model").value.trim();
  const previous = editing?.spec;
  return {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: editing?.metadata.name ?? field(f, "name").value.trim(), namespace: ctx.namespace },
    spec: {
      ...previous,
      runtimeRef: field<HTMLSelectElement>(f, "runtime").value,
      // valueSet is the API's "keep what is stored" (AgentWrite): typed for the write, not the read.
      credentials: credentials as AgentInput["spec"]["credentials"],
      ...(baseUrl || model ? { model: { ...previous?.model, baseUrl, name: model } } : { model: undefined }),
      egress,
    },
  } as AgentInput;
}

export async function saveAgent(ctx: PageContext): Promise<boolean> {
  showError("agent-form-error");
  try {
    const agent = agentFromForm(ctx);
    if (editing) await ctx.client.put("agents", agent);
    else await ctx.client.create("agents", agent);
    form("agent-form").hidden = true;
    editing = undefined;
    await showAgents(ctx);
    return true;
  } catch (error) {
    showError("agent-form-error", error);
    return false;
  }
}

export function wireAgentForm(ctx: () => PageContext | undefined): void {
  $("agents-new").addEventListener("click", () => {
    const c = ctx();
    if (c) openAgentForm(c);
  });
  $("agent-add-credential").addEventListener("click", () => $("agent-credentials").append(credentialRow()));
  $("agent-cancel").addEventListener("click", () => {
    form("agent-form").hidden = true;
    editing = undefined;
  });
  form("agent-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const c = ctx();
    if (c) void saveAgent(c);
  });
}

// ---- AgentRuntimes ----

export async function showRuntimes(ctx: PageContext): Promise<void> {
  showError("runtimes-error");
  try {
    runtimes = await ctx.client.listAll("agentruntimes", ctx.namespace);
  } catch (error) {
    showError("runtimes-error", error);
  }
  $("no-runtimes").hidden = runtimes.length > 0;
  $("runtimes").replaceChildren(
    ...runtimes.map((r) => {
      const approved = r.status?.approved;
      return el(
        "tr",
        { dataset: { runtime: r.metadata.name } },
        el("td", { className: "name", textContent: r.metadata.name }),
        el("td", { className: "id wide", textContent: r.spec.image, title: r.spec.image }),
        el("td", { textContent: r.spec.contract }),
        el("td", { textContent: r.spec.capabilities.join(", ") || "—" }),
        el("td", { textContent: r.spec.warmPool ? String(r.spec.warmPool.size) : "0" }),
        el("td", {
          textContent: approved === undefined ? "—" : approved ? "approved" : "not approved",
          title: r.status?.message ?? "",
          className: approved === false ? "bad" : "",
          dataset: { field: "approved" },
        }),
      );
    }),
  );
}

// ---- runners (admin) ----

export async function showRunners(ctx: PageContext): Promise<void> {
  showError("runners-error");
  if (!ctx.admin) {
    $("runners").replaceChildren();
    showError("runners-error", new Error("runners are the admin's: this token cannot list them"));
    return;
  }
  let runners: RunnerInfo[] = [];
  try {
    runners = await ctx.client.allRunners();
  } catch (error) {
    showError("runners-error", error);
  }
  $("no-runners").hidden = runners.length > 0;
  $("runners").replaceChildren(
    ...runners.map((r) =>
      el(
        "tr",
        { dataset: { runner: r.runner_name } },
        el("td", { className: "name", textContent: r.runner_name }),
        el("td", { textContent: r.engine }),
        el("td", {
          textContent: r.connected ? (r.draining ? "draining" : "attached") : "away",
          dataset: { field: "state" },
        }),
        el("td", { textContent: `${r.load} / ${r.capacity}` }),
        el("td", { textContent: String(r.live_sessions) }),
        el("td", { className: "wide", textContent: new Date(r.last_seen_at).toLocaleString() }),
        el(
          "td",
          { className: "actions" },
          el("button", {
            type: "button",
            textContent: r.draining ? "Undrain" : "Drain",
            onclick: async () => {
              try {
                await (r.draining
                  ? ctx.client.undrainRunner(r.runner_name)
                  : ctx.client.drainRunner(r.runner_name));
              } catch (error) {
                showError("runners-error", error);
              }
              await showRunners(ctx);
            },
          }),
        ),
      ),
    ),
  );
}

// ---- Webhooks ----

/**
 * The events a Webhook may ask for (contracts/webhook.ts WebhookEvent, kept as plain values here so
 * the page does not bundle zod; catalog-pages.test.ts checks they agree).
 */
export const WEBHOOK_EVENTS = [
  "created",
  "ready",
  "paused",
  "stopped",
  "evicted",
  "failed",
  "restarted",
  "expired",
  "deleted",
  "snapshot.ready",
] as const;

export async function showWebhooks(ctx: PageContext): Promise<void> {
  showError("webhooks-error");
  $("webhooks-new").hidden = ctx.role !== "edit";
  let hooks: Webhook[] = [];
  try {
    hooks = await ctx.client.listAll("webhooks", ctx.namespace);
  } catch (error) {
    showError("webhooks-error", error);
  }
  $("no-webhooks").hidden = hooks.length > 0;
  $("webhooks").replaceChildren(
    ...hooks.map((h) =>
      el(
        "tr",
        { dataset: { webhook: h.metadata.name } },
        el("td", { className: "name", textContent: h.metadata.name }),
        el("td", { className: "wide", textContent: h.spec.url }),
        el("td", { textContent: h.spec.events.join(", ") }),
        el(
          "td",
          { className: "actions" },
          el("button", {
            type: "button",
            textContent: "Deliveries",
            onclick: () => void showDeliveries(ctx, h.metadata.name),
          }),
          ...(ctx.role === "edit"
            ? [
                " ",
                el("button", {
                  type: "button",
                  className: "danger",
                  textContent: "Delete",
                  onclick: async () => {
                    if (
                      !window.confirm(`Delete webhook ${h.metadata.name}? Its receiver is told nothing more.`)
                    )
                      return;
                    try {
                      await ctx.client.delete("webhooks", ctx.namespace, h.metadata.name);
                    } catch (error) {
                      showError("webhooks-error", error);
                    }
                    await showWebhooks(ctx);
                  },
                }),
              ]
            : []),
        ),
      ),
    ),
  );
}

/** The recent delivery attempts of one Webhook, newest first. */
async function showDeliveries(ctx: PageContext, name: string): Promise<void> {
  showError("webhooks-error");
  $("deliveries-title").textContent = `Deliveries of ${name}`;
  $("deliveries-pane").hidden = false;
  try {
    const { items } = await ctx.client.webhookDeliveries(ctx.namespace, name);
    $("no-deliveries").hidden = items.length > 0;
    $("deliveries").replaceChildren(
      ...items.map((d) =>
        el(
          "tr",
          { dataset: { delivery: d.id, attempt: String(d.attempt) } },
          el("td", { textContent: new Date(d.time).toLocaleString() }),
          el("td", { textContent: d.type }),
          el("td", { textContent: d.session.name }),
          el("td", { textContent: String(d.attempt) }),
          el("td", { textContent: d.statusCode !== undefined ? String(d.statusCode) : (d.error ?? "—") }),
          el("td", { textContent: d.outcome, dataset: { field: "outcome" } }),
        ),
      ),
    );
  } catch (error) {
    showError("webhooks-error", error);
  }
}

/** Creates the Webhook the form describes; a generated secret is shown once, under the form. */
async function createWebhook(ctx: PageContext): Promise<void> {
  const f = form("webhook-form");
  showError("webhook-form-error");
  $("webhook-secret").hidden = true;
  const events = WEBHOOK_EVENTS.filter(
    (e) => (f.querySelector(`input[value="${e}"]`) as HTMLInputElement).checked,
  );
  const secret = field(f, "secret").value.trim();
  try {
    const made = await ctx.client.create("webhooks", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Webhook",
      metadata: { name: field(f, "name").value.trim(), namespace: ctx.namespace },
      spec: { url: field(f, "url").value.trim(), events, ...(secret ? { secret } : {}) },
    });
    field(f, "secret").value = "";
    if (!secret && made.spec.secret) {
      $("webhook-secret-value").textContent = made.spec.secret;
      $("webhook-secret").hidden = false;
    }
    field(f, "name").value = "";
    await showWebhooks(ctx);
  } catch (error) {
    showError("webhook-form-error", error);
  }
}

export function wireWebhookForm(ctx: () => PageContext | undefined): void {
  $("webhook-events").replaceChildren(
    ...WEBHOOK_EVENTS.map((e) =>
      el(
        "label",
        { className: "check" },
        el("input", { type: "checkbox", value: e, checked: ["ready", "stopped", "failed"].includes(e) }),
        e,
      ),
    ),
  );
  $("webhooks-new").addEventListener("click", () => {
    form("webhook-form").hidden = false;
    field(form("webhook-form"), "name").focus();
  });
  form("webhook-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const c = ctx();
    if (c) void createWebhook(c);
  });
}
