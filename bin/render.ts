import { stringify } from "yaml";
import type { AgentSessionStatus } from "../contracts/rpc.ts";
import type { HarnessSession } from "../contracts/harness-session.ts";
import type { MCPServerView } from "../contracts/mcp.ts";
import type { Agent, AgentRuntime, SkillPack } from "../contracts/resources.ts";
import type { SessionSnapshot } from "../contracts/session-snapshot.ts";
import type { Webhook } from "../contracts/webhook.ts";
import { UsageError } from "./cli-context.ts";
import type { CliKind } from "./kinds.ts";

/**
 * `-o`: `table` (the default), `wide` (a table with more columns), `name` (`kind/name`, one a
 * line, for scripts), `json`, `yaml`. Commands list which they take.
 */
export type OutputFormat = "table" | "wide" | "name" | "json" | "yaml";

const BASIC_FORMATS = ["table", "json", "yaml"] as const;

export function parseOutput<F extends OutputFormat = (typeof BASIC_FORMATS)[number]>(
  text: string | undefined,
  json: boolean,
  allowed: readonly F[] = BASIC_FORMATS as unknown as readonly F[],
): F {
  if (text === undefined) return (json ? "json" : "table") as F;
  if ((allowed as readonly string[]).includes(text)) return text as F;
  throw new UsageError(`-o must be ${allowed.slice(0, -1).join(", ")} or ${allowed.at(-1)}, got ${text}`);
}

/** Columns padded to their widest cell, kubectl-style (3 spaces between columns). */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("   ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

/** `5s`, `3m`, `2h`, `4d` since `iso`, as kubectl's AGE column. */
export function age(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "<none>";
  const seconds = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
  if (Number.isNaN(seconds)) return "<unknown>";
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}

export function formatData(value: unknown, format: "json" | "yaml"): string {
  return format === "json" ? JSON.stringify(value, null, 2) : stringify(value).trimEnd();
}

type AnyResource =
  | AgentRuntime
  | Agent
  | MCPServerView
  | SkillPack
  | HarnessSession
  | SessionSnapshot
  | Webhook;

/** How `get` lays a table out: `-o wide` adds columns, `-A` a NAMESPACE column first. */
export type TableOptions = { wide?: boolean; namespaces?: boolean };

/** `header`/`rows` with the NAMESPACE column first when `namespaces`. */
function namespaced(
  header: string[],
  rows: { namespace: string; cells: string[] }[],
  options: TableOptions,
): string {
  return options.namespaces
    ? table(
        ["NAMESPACE", ...header],
        rows.map((r) => [r.namespace, ...r.cells]),
      )
    : table(
        header,
        rows.map((r) => r.cells),
      );
}

/** The header and cells of `get KIND` (the wide columns last when `wide`). */
export function resourceTable(kind: CliKind, items: readonly unknown[], options: TableOptions = {}): string {
  const wide = options.wide === true;
  const withWide = (base: string[], extra: string[]) => (wide ? [...base, ...extra] : base);
  switch (kind) {
    case "agentruntimes":
      return namespaced(
        withWide(["NAME", "CONTRACT", "STREAMING", "APPROVED", "IMAGE", "AGE"], ["CAPABILITIES"]),
        (items as AgentRuntime[]).map((r) => ({
          namespace: r.metadata.namespace,
          cells: withWide(
            [
              r.metadata.name,
              r.spec.contract,
              String(r.spec.capabilities.includes("streaming")),
              r.status ? String(r.status.approved) : "<unknown>",
              wide ? r.spec.image : shortImage(r.spec.image),
              age(r.metadata.creationTimestamp),
            ],
            [r.spec.capabilities.join(",") || "<none>"],
          ),
        })),
        options,
      );
    case "agents":
      return namespaced(
        withWide(["NAME", "RUNTIME", "MODEL", "CREDENTIALS", "AGE"], ["MODEL URL", "CREDENTIAL NAMES"]),
        (items as Agent[]).map((a) => ({
          namespace: a.metadata.namespace,
          cells: withWide(
            [
              a.metadata.name,
              a.spec.runtimeRef,
              a.spec.model?.name ?? "<none>",
              String(a.spec.credentials.length),
              age(a.metadata.creationTimestamp),
            ],
            [a.spec.model?.baseUrl ?? "<none>", a.spec.credentials.map((c) => c.name).join(",") || "<none>"],
          ),
        })),
        options,
      );
    case "mcpservers":
      return table(
        ["NAME", "URL", "ALLOW", "DENY", "CREDENTIALS", "TIMEOUT", "AGE"],
        (items as MCPServerView[]).map((m) => [
          m.metadata.name,
          m.spec.url ?? "<none>",
          m.spec.toolsAllow ? m.spec.toolsAllow.join(",") || "<none>" : "<all>",
          m.spec.toolsDeny.join(",") || "<none>",
          String(m.spec.credentials.length),
          m.spec.timeout ?? "60s",
          age(m.metadata.creationTimestamp),
        ]),
      );
    case "skillpacks":
      return table(
        ["NAME", "SKILLS", "AGE"],
        (items as SkillPack[]).map((p) => [
          p.metadata.name,
          p.spec.skills.map((s) => s.name).join(","),
          age(p.metadata.creationTimestamp),
        ]),
      );
    case "harnesssessions":
      return namespaced(
        withWide(
          ["NAME", "AGENT", "DESIRED", "PHASE", "REASON", "REQUESTS", "LAST ACTIVITY", "AGE"],
          ["RUNTIME", "ACTIVE", "ERRORS", "LAST OUTCOME", "SESSION ID", "RESTARTS"],
        ),
        (items as HarnessSession[]).map((s) => ({
          namespace: s.metadata.namespace,
          cells: withWide(
            [
              s.metadata.name,
              s.spec.agentRef,
              s.spec.desiredState,
              s.status.phase,
              s.status.conditions.find((c) => c.type === "Ready")?.reason ?? "",
              String(s.status.requestCount),
              s.status.lastActivityTime ? age(s.status.lastActivityTime) : "<none>",
              age(s.metadata.creationTimestamp),
            ],
            [
              s.spec.runtimeRef ?? "<unbound>",
              String(s.status.activeRequests),
              String(s.status.errorCount),
              s.status.lastRequestOutcome ?? "<none>",
              s.status.sessionId ?? "<none>",
              String(s.status.restartCount),
            ],
          ),
        })),
        options,
      );
    case "sessionsnapshots":
      return table(
        ["NAME", "SESSION", "AGENT", "RUNTIME", "PHASE", "SIZE", "ENGINE", "RUNNER", "AGE"],
        (items as SessionSnapshot[]).map((s) => [
          s.metadata.name,
          s.spec.sessionRef,
          s.spec.agentRef,
          s.spec.runtimeRef,
          s.status.phase,
          s.status.sizeBytes === undefined ? "<none>" : bytes(s.status.sizeBytes),
          s.status.engine ?? "<none>",
          s.status.runner ?? "<none>",
          age(s.metadata.creationTimestamp),
        ]),
      );
    case "webhooks":
      return table(
        ["NAME", "URL", "EVENTS", "AGE"],
        (items as Webhook[]).map((w) => [
          w.metadata.name,
          w.spec.url,
          w.spec.events.join(","),
          age(w.metadata.creationTimestamp),
        ]),
      );
    case "sessions":
      return table(
        ["SESSION", "CONTAINER", "AGENT", "STATE", "REASON", "UPDATED"],
        (items as AgentSessionStatus[]).map((s) => [
          s.session_id,
          s.container_name,
          s.agent_ref,
          s.state,
          s.reason ?? "",
          age(s.updated_at),
        ]),
      );
    default: {
      const never: never = kind;
      return never;
    }
  }
}

/** `512B`, `3.4KiB`, `50.0MiB`, `1.2GiB`. */
export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n}B` : `${value.toFixed(1)}${units[unit]}`;
}

/** `registry/repo@sha256:abcdef012345…`: enough of the digest to tell images apart. */
function shortImage(image: string): string {
  const at = image.indexOf("@sha256:");
  return at < 0 ? image : `${image.slice(0, at)}@sha256:${image.slice(at + 8, at + 20)}…`;
}

/** Literal credential values never reach a terminal through `describe`. */
function withoutSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutSecrets);
  if (!value || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value))
    out[k] = k === "credentials" ? redactCredentials(v) : withoutSecrets(v);
  return out;
}

function redactCredentials(value: unknown): unknown {
  if (!Array.isArray(value)) return value;
  return value.map((c: Record<string, unknown>) => ("value" in c ? { ...c, value: "(literal, hidden)" } : c));
}

function indent(text: string, by = "  "): string {
  return text
    .split("\n")
    .map((l) => (l ? by + l : l))
    .join("\n");
}

/** `describe`: the object for people — metadata, spec, status and a conditions table. */
export function describeResource(kindName: string, resource: AnyResource): string {
  const meta = resource.metadata as {
    name: string;
    namespace: string;
    creationTimestamp?: string;
    uid?: string;
    generation?: number;
    deletionTimestamp?: string;
  };
  const lines = [
    `Name:         ${meta.name}`,
    `Namespace:    ${meta.namespace}`,
    `Kind:         ${kindName}`,
    `Created:      ${meta.creationTimestamp ? `${meta.creationTimestamp} (${age(meta.creationTimestamp)} ago)` : "<unknown>"}`,
  ];
  if (meta.uid) lines.push(`UID:          ${meta.uid}`);
  if (meta.generation !== undefined) lines.push(`Generation:   ${meta.generation}`);
  if (meta.deletionTimestamp) lines.push(`Deleting:     since ${meta.deletionTimestamp}`);
  lines.push("Spec:", indent(stringify(withoutSecrets(resource.spec)).trimEnd()));
  if (resource.kind === "AgentRuntime" && resource.status) {
    lines.push("Status:", indent(stringify(resource.status).trimEnd()));
  } else if ("status" in resource && resource.status && "conditions" in resource.status) {
    const { conditions, ...status } = resource.status;
    lines.push("Status:", indent(stringify(status).trimEnd()));
    lines.push(
      "Conditions:",
      conditions.length
        ? indent(
            table(
              ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"],
              conditions.map((c) => [c.type, c.status, c.reason, age(c.lastTransitionTime), c.message]),
            ),
          )
        : "  <none>",
    );
  }
  return lines.join("\n");
}

export function describeSession(s: AgentSessionStatus): string {
  return [
    `Session:      ${s.session_id}`,
    `Container:    ${s.container_name}`,
    `Agent:        ${s.agent_ref}`,
    `State:        ${s.state}`,
    `Reason:       ${s.reason ?? "<none>"}`,
    `Runner:       ${s.runner_id ?? "<none>"}`,
    `Updated:      ${s.updated_at} (${age(s.updated_at)} ago)`,
  ].join("\n");
}
