import { Hono } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import {
  type Agent,
  type AgentRuntime,
  type AgentView,
  AgentWrite,
  API_VERSION,
  type Resource,
  type ResourceKind,
  type ResourcePlural,
  ResourceKinds,
} from "../../contracts/resources.ts";
import { privilegedSkillPackFields, SKILL_PACK_INVARIANT } from "../../contracts/skill-pack.ts";
import { DnsLabel } from "../../contracts/session-spec.ts";
import type { Admission } from "../lifecycle/admission.ts";
import { listQuery, pageOf } from "../lifecycle/pagination.ts";
import { parseInput, readJson, withPathMetadata } from "../lifecycle/request-body.ts";
import { alreadyExists } from "../lifecycle/already-exists.ts";
import { createOnly } from "./create-only.ts";
import { sameJson, WRITE_RESULT_HEADER } from "../lifecycle/unchanged-write.ts";
import type { Store } from "../store/store.ts";
import { warmPoolEntries } from "../lifecycle/warm-pools.ts";
import { offeredCredential } from "../lifecycle/session-spec-builder.ts";
import { type MCPServer, MCPServerWrite, redactedMcpServer } from "../../contracts/mcp.ts";
import { keptCredentials } from "../lifecycle/kept-credentials.ts";
import { assertMcpServerAdmitted } from "../lifecycle/mcp-servers.ts";

/**
 * kubectl-style resources under `/v1/namespaces/{ns}/{agentruntimes|agents|skillpacks}[/{name}]`:
 * PUT creates or replaces (201 on create), GET reads one or lists a page (`?limit=&continue=`,
 * by name; `metadata.continue` names the next page), DELETE removes. An Agent whose egress
 * reaches a forbidden destination is INVALID_ARGUMENT, one outside the operator's allow-list
 * (AGENT_SESSIONS_EGRESS_ALLOW) FAILED_PRECONDITION, each naming every rule (egress-guard.ts). A
 * SkillPack asking for privileged execution (Sympozium's sidecar, host access, RBAC) is
 * INVALID_ARGUMENT naming the invariant it breaks (contracts/skill-pack.ts), and nothing is stored.
 */
export function resourceRoutes(options: {
  store: Store;
  admission: Admission;
  /**
   * The environment offered to sessions (offeredCredentialEnv): an Agent credential whose
   * `secretRef.env` names a variable outside it, or one it leaves unset, is INVALID_ARGUMENT.
   * @default none offered
   */
  secretEnv?: Readonly<Record<string, string | undefined>>;
  /** Told each one written: sessions that failed on a reference to it are retried (issue 34). */
  onWritten?: (kind: ResourceKind, namespace: string, name: string) => Promise<void>;
}): Hono {
  const { store, admission, onWritten } = options;
  const secretEnv = options.secretEnv ?? {};
  // The alternation stays in a group: hono's RegExpRouter splices the pattern into one big
  // regex, and a bare `a|b` then swallowed `…/agentruntimes/{name}` into the list route once
  // other `/:ns/…/:name` routes (HarnessSessions) were mounted beside these.
  const app = new Hono();
  const target = (ns: string, plural: string, name?: string) => {
    const namespace = parseInput(DnsLabel, ns, "namespace", { in: "path", name: "namespace" });
    if (name !== undefined) parseInput(DnsLabel, name, "name", { in: "path", name: "name" });
    const entry = ResourceKinds[plural as ResourcePlural];
    return { namespace, ...entry };
  };

  /**
   * What a client reads: an AgentRuntime with the approval the operator's configuration gives it;
   * an Agent with its credentials write-only (redactedAgent).
   */
  const shown = shownResource(admission);

  app.get("/:ns/:plural{(?:agentruntimes|agents|mcpservers|skillpacks)}", async (c) => {
    const { namespace, kind } = target(c.req.param("ns"), c.req.param("plural"));
    const list = `${c.req.param("plural")}/${namespace}`;
    const query = listQuery(list, { limit: c.req.query("limit"), continue: c.req.query("continue") });
    const page = pageOf(list, await store.listResources(kind, namespace, query), query, (r) => [
      r.metadata.name,
    ]);
    const metadata = page.next === undefined ? {} : { continue: page.next };
    return c.json({ apiVersion: API_VERSION, kind: `${kind}List`, metadata, items: page.items.map(shown) });
  });

  app.get("/:ns/:plural{(?:agentruntimes|agents|mcpservers|skillpacks)}/:name", async (c) => {
    const name = c.req.param("name");
    const { namespace, kind } = target(c.req.param("ns"), c.req.param("plural"), name);
    const resource = await store.getResource(kind, namespace, name);
    if (!resource) throw new CodedError("NOT_FOUND", `${kind} ${namespace}/${name} not found`);
    return c.json(shown(resource));
  });

  app.put("/:ns/:plural{(?:agentruntimes|agents|mcpservers|skillpacks)}/:name", async (c) => {
    const name = c.req.param("name");
    const { namespace, kind, schema } = target(c.req.param("ns"), c.req.param("plural"), name);
    const ifAbsent = createOnly(c);
    const body = withPathMetadata(await readJson(c), namespace, name);
    if (kind === "SkillPack") assertUnprivileged(body, namespace, name);
    const resource: Resource =
      kind === "Agent"
        ? await keptCredentials<Agent>(store, "Agent", parseInput(AgentWrite, body, kind))
        : kind === "MCPServer"
          ? await keptCredentials<MCPServer>(store, "MCPServer", parseInput(MCPServerWrite, body, kind))
          : parseInput(schema, body, kind);
    if (resource.metadata.name !== name || resource.metadata.namespace !== namespace)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${kind}: metadata.name and metadata.namespace must match the path (${namespace}/${name})`,
        { field_violations: [{ field: "metadata", description: "must match the path" }] },
      );
    if (resource.kind === "Agent") {
      admission.egress.assertAllowed(resource.spec.egress, `Agent ${namespace}/${name}`);
      if (resource.spec.model)
        admission.egress.assertModelAllowed(resource.spec.model.baseUrl, `Agent ${namespace}/${name}`);
      assertCredentialsOffered(resource, secretEnv);
    }
    if (resource.kind === "MCPServer") assertMcpServerAdmitted(resource, admission, secretEnv);
    const toStore = stripped(resource);
    // The same object again (an identical `apply`): nothing written, nobody told.
    const before = ifAbsent ? undefined : await store.getResource(kind, namespace, name);
    if (before && sameJson(withoutTimestamps(before), withoutTimestamps(toStore))) {
      c.header(WRITE_RESULT_HEADER, "unchanged");
      return c.json(shown(before), 200);
    }
    await assertWarmPoolQuota(store, admission, resource);
    const { resource: stored, created } = await store.putResource(toStore, { ifAbsent });
    if (ifAbsent && !created) throw alreadyExists(kind, namespace, name);
    c.header(WRITE_RESULT_HEADER, created ? "created" : "configured");
    await onWritten?.(stored.kind, namespace, name);
    return c.json(shown(stored), created ? 201 : 200);
  });

  app.delete("/:ns/:plural{(?:agentruntimes|agents|mcpservers|skillpacks)}/:name", async (c) => {
    const name = c.req.param("name");
    const { namespace, kind } = target(c.req.param("ns"), c.req.param("plural"), name);
    const deleted = await store.deleteResource(kind, namespace, name);
    if (!deleted) throw new CodedError("NOT_FOUND", `${kind} ${namespace}/${name} not found`);
    return c.json(shown(deleted));
  });

  return app;
}

/**
 * What a client reads: an AgentRuntime with the approval the operator's configuration gives it;
 * an Agent with its credentials write-only (redactedAgent).
 */
export function shownResource(admission: Admission): (resource: Resource) => unknown {
  return (resource) => {
    if (resource.kind === "Agent") return redactedAgent(resource);
    if (resource.kind === "MCPServer") return redactedMcpServer(resource);
    if (resource.kind === "SkillPack") return resource;
    const { approved: _ignored, ...spec } = resource.spec;
    return { ...resource, spec, status: admission.runtimes.verdict(resource) };
  };
}

/**
 * Credentials are write-only (issue 17): every answer (GET, list, PUT, DELETE) names each
 * credential and its source but never a literal `value`; `valueSet: true` says one is stored.
 */
export function redactedAgent(agent: Agent): AgentView {
  const credentials = agent.spec.credentials.map(({ value, ...rest }) =>
    value === undefined ? rest : { ...rest, valueSet: true as const },
  );
  return { ...agent, spec: { ...agent.spec, credentials } };
}

/**
 * Every `secretRef` of an Agent names a variable the server offers to its namespace and sets, else
 * INVALID_ARGUMENT naming each such credential's field, before anything is stored: an Agent that
 * could never provision is refused when written, not when a session first needs it. Provisioning
 * checks again (resolveCredentials): a variable can vanish with a restart.
 */
function assertCredentialsOffered(agent: Agent, offered: Readonly<Record<string, string | undefined>>): void {
  const { namespace, name } = agent.metadata;
  const violations = agent.spec.credentials.flatMap((credential, index) => {
    if (credential.secretRef === undefined) return [];
    const variable = credential.secretRef.env;
    const read = offeredCredential(namespace, variable, offered);
    if (read.ok) return [];
    return [
      {
        field: `spec.credentials.${index}.secretRef.env`,
        description: `credential ${credential.name} refers to environment variable ${variable}, ${read.why}`,
      },
    ];
  });
  if (violations.length > 0)
    throw new CodedError(
      "INVALID_ARGUMENT",
      `invalid Agent ${namespace}/${name}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
      { field_violations: violations },
    );
}

/**
 * A SkillPack is Markdown only: Sympozium's fields for privileged execution (a sidecar with host
 * access, host networking or PID, privileged, RBAC or cluster RBAC, a Secret, volumes; another
 * image) are INVALID_ARGUMENT naming the invariant and every such field, before anything is stored.
 */
function assertUnprivileged(body: unknown, namespace: string, name: string): void {
  const fields = privilegedSkillPackFields(body);
  if (fields.length === 0) return;
  throw new CodedError(
    "INVALID_ARGUMENT",
    `invalid SkillPack ${namespace}/${name}: ${fields.join(", ")} refused for sessions; ${SKILL_PACK_INVARIANT}`,
    {
      reason: "PrivilegedSkillPack",
      field_violations: fields.map((field) => ({ field, description: SKILL_PACK_INVARIANT })),
    },
  );
}

/**
 * A write that would give the namespace's warm pools more entries than its quota is refused
 * (RESOURCE_EXHAUSTED) before it is stored; one that adds none never is.
 */
async function assertWarmPoolQuota(store: Store, admission: Admission, written: Resource): Promise<void> {
  if (written.kind === "SkillPack") return;
  const namespace = written.metadata.namespace;
  const quotas = admission.quotas;
  if (written.kind === "MCPServer") return;
  if (!quotas || quotas.limit("warmPoolEntries", namespace) === undefined) return;
  const agents = (await store.listResources("Agent", namespace)) as Agent[];
  const runtimes = (await store.listResources("AgentRuntime", namespace)) as AgentRuntime[];
  const replaced = <T extends Resource>(list: T[], by: T) => [
    ...list.filter((r) => r.metadata.name !== by.metadata.name),
    by,
  ];
  const before = warmPoolEntries(agents, runtimes);
  const after =
    written.kind === "Agent"
      ? warmPoolEntries(replaced(agents, written), runtimes)
      : warmPoolEntries(agents, replaced(runtimes, written));
  if (after > before) quotas.assertRoom("warmPoolEntries", namespace, before, after - before);
}

/** A resource as written: its `metadata.creationTimestamp` is the store's. */
function withoutTimestamps(resource: Resource): unknown {
  const { creationTimestamp: _created, ...metadata } = resource.metadata as Resource["metadata"] & {
    creationTimestamp?: string;
  };
  return { ...resource, metadata };
}

/**
 * What is stored of a manifest: an AgentRuntime's `spec.approved` and `status` are a writer's
 * say-so, never the approval (that is the operator's configuration: runtime-approval.ts).
 */
function stripped(resource: Resource): Resource {
  if (resource.kind !== "AgentRuntime") return resource;
  const { status: _status, ...rest } = resource;
  const { approved: _approved, ...spec } = rest.spec;
  return { ...rest, spec };
}
