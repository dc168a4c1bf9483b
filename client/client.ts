import type { z } from "zod";
import type { CreatedToken, CreateTokenRequest, TokenList, WhoAmI } from "../contracts/access.ts";
import type { StreamEvent } from "../contracts/adapter.ts";
import type { EventFrame } from "../contracts/compass.ts";
import { type ErrorCode, httpStatusOf, isErrorCode } from "../contracts/error-codes.ts";
import type {
  HarnessPhase,
  HarnessReply,
  HarnessSession,
  HarnessSessionInput,
} from "../contracts/harness-session.ts";
import { type WaitForOptions, waitFor } from "./wait-for.ts";
import type { API_VERSION } from "../contracts/resources.ts";
import type { SessionMetricsReply } from "../contracts/session-metrics.ts";
import type { LogLine, SessionLogsReply } from "../contracts/session-logs.ts";
import type { SessionSnapshot } from "../contracts/session-snapshot.ts";
import type { WebhookDeliveryList } from "../contracts/webhook.ts";
import type { AgentSessionStatus, Rpc, RpcMethod } from "../contracts/rpc.ts";
import type { RunnerInfo, RunnerList, RunnerTokenIssued, RunnerTokenRevoked } from "../contracts/runners.ts";
import { ClientError } from "./client-error.ts";
import type { ListPage, ResourceList, ResourcePlural, ResourceTypes } from "./resource-kinds.ts";
import { readSse } from "./sse.ts";
import type {
  WorkspaceDeleteResult,
  WorkspaceListing,
  WorkspaceWriteResult,
} from "../contracts/workspace-files.ts";

export type RpcRequest<M extends RpcMethod> = z.input<(typeof Rpc)[M]["request"]>;
export type RpcResponse<M extends RpcMethod> = z.infer<(typeof Rpc)[M]["response"]>;

export type ClientOptions = {
  /** `http://host:port` of the server. */
  baseUrl: string;
  /** The bearer token: the admin token or a scoped API token (`POST /v1/tokens`). */
  token?: string | undefined;
  /** @default globalThis.fetch */
  fetch?: typeof fetch;
};

/**
 * What `events()` yields: a frame with its event id (named by its session's `namespace` and
 * HarnessSession `name`), or a note that retained frames are gone.
 */
export type EventMessage =
  | { kind: "frame"; id: string; frame: EventFrame }
  | { kind: "gap"; session_id: string; namespace?: string; name?: string; from_seq: number; to_seq: number };

export type EventsOptions = {
  /** Follow one session (event ids are its seq); else every session (global frame ids). */
  sessionId?: string | undefined;
  /**
   * Follow one HarnessSession by name: the frames of every agent session its workspace ran
   * (across restarts), its PhaseChanged and RequestFinished events among them; global frame ids.
   */
  harnessSession?: { namespace: string; name: string } | undefined;
  /** Resume after this event id; without it the stream starts with the next frame. */
  lastEventId?: string | undefined;
  signal?: AbortSignal | undefined;
  /** Reconnect (with Last-Event-ID) this many times in a row when the stream drops. @default 5 */
  maxReconnects?: number;
  /** Wait before a reconnect, doubled each time up to 10 s. @default 500 */
  reconnectDelayMs?: number;
  /** Told before each reconnect. */
  onReconnect?: (attempt: number, error: unknown) => void;
  /** Told each time the stream is open (the first connect and every reconnect), before its events. */
  onOpen?: () => void;
};

export type SendOptions = { id?: string | undefined; signal?: AbortSignal | undefined };

/**
 * A typed client of the agent-sessions HTTP API (docs/http-api.md): lifecycle RPCs,
 * kubectl-style resources, the request proxy and the event stream. Types come from the zod
 * contracts; the server validates, so the client sends what it is given. Every failure is a
 * `ClientError` carrying the gRPC `code`.
 */
export class AgentSessionsClient {
  readonly baseUrl: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** `POST /v1/rpc/{method}`. */
  rpc<M extends RpcMethod>(
    method: M,
    body: RpcRequest<M>,
    init: { signal?: AbortSignal } = {},
  ): Promise<RpcResponse<M>> {
    return this.#json("POST", `/v1/rpc/${method}`, body, init.signal) as Promise<RpcResponse<M>>;
  }

  /** PUT (create or replace) a manifest at its `metadata.namespace` (default `default`) and name. */
  async put<P extends ResourcePlural>(
    plural: P,
    manifest: ResourceTypes[P]["input"],
  ): Promise<{ resource: ResourceTypes[P]["output"]; created: boolean; unchanged: boolean }> {
    const { namespace = "default", name } = manifest.metadata;
    const response = await this.#send("PUT", resourcePath(plural, namespace, name), manifest);
    return {
      resource: (await response.json()) as ResourceTypes[P]["output"],
      created: response.status === 201,
      // The server stored nothing new: the same object was there (its generation did not move).
      unchanged: response.headers.get("x-agent-sessions-write") === "unchanged",
    };
  }

  /**
   * Create a manifest, never replacing one (`PUT` with `If-None-Match: *`): a name in use is a
   * ClientError ALREADY_EXISTS and the stored object stays as it was.
   */
  async create<P extends ResourcePlural>(
    plural: P,
    manifest: ResourceTypes[P]["input"],
  ): Promise<ResourceTypes[P]["output"]> {
    const { namespace = "default", name } = manifest.metadata;
    const response = await this.#send("PUT", resourcePath(plural, namespace, name), manifest, undefined, {
      "if-none-match": "*",
    });
    return (await response.json()) as ResourceTypes[P]["output"];
  }

  get<P extends ResourcePlural>(
    plural: P,
    namespace: string,
    name: string,
  ): Promise<ResourceTypes[P]["output"]> {
    return this.#json("GET", resourcePath(plural, namespace, name)) as Promise<ResourceTypes[P]["output"]>;
  }

  /** One page of a namespace's objects, by name; `metadata.continue` names the next page. */
  list<P extends ResourcePlural>(
    plural: P,
    namespace: string,
    page: ListPage = {},
  ): Promise<ResourceList<ResourceTypes[P]["output"]>> {
    const query = new URLSearchParams();
    if (page.limit !== undefined) query.set("limit", String(page.limit));
    if (page.continue !== undefined) query.set("continue", page.continue);
    const suffix = query.size > 0 ? `?${query}` : "";
    return this.#json("GET", `${resourcePath(plural, namespace)}${suffix}`) as Promise<
      ResourceList<ResourceTypes[P]["output"]>
    >;
  }

  /** Every object of a namespace, page after page. */
  async listAll<P extends ResourcePlural>(
    plural: P,
    namespace: string,
    limit?: number,
  ): Promise<ResourceTypes[P]["output"][]> {
    const items: ResourceTypes[P]["output"][] = [];
    let next: string | undefined;
    do {
      const page = await this.list(plural, namespace, {
        ...(limit ? { limit } : {}),
        ...(next ? { continue: next } : {}),
      });
      items.push(...page.items);
      next = page.metadata?.continue;
    } while (next !== undefined);
    return items;
  }

  /** Every runner, page after page. */
  async allRunners(): Promise<RunnerInfo[]> {
    const items: RunnerInfo[] = [];
    let next: string | undefined;
    do {
      const page = await this.runners(next ? { continue: next } : {});
      items.push(...page.items);
      next = page.metadata?.continue;
    } while (next !== undefined);
    return items;
  }

  /** GetAgentStatus of every retained agent session, page after page. */
  async allSessionStatuses(pageSize?: number): Promise<AgentSessionStatus[]> {
    const sessions: AgentSessionStatus[] = [];
    let next: string | undefined;
    do {
      const page = await this.rpc("GetAgentStatus", {
        ...(pageSize ? { page_size: pageSize } : {}),
        ...(next ? { page_token: next } : {}),
      });
      sessions.push(...page.sessions);
      next = page.next_page_token;
    } while (next !== undefined);
    return sessions;
  }

  /** JSON merge patch (RFC 7386) of a manifest, e.g. `{spec: {desiredState: "stopped"}}`. */
  patch<P extends ResourcePlural>(
    plural: P,
    namespace: string,
    name: string,
    patch: Record<string, unknown>,
  ): Promise<ResourceTypes[P]["output"]> {
    return this.#json("PATCH", resourcePath(plural, namespace, name), patch, undefined, {
      "content-type": "application/merge-patch+json",
    }) as Promise<ResourceTypes[P]["output"]>;
  }

  /** Deletes and answers the resource's last state (a HarnessSession after its teardown). */
  delete<P extends ResourcePlural>(
    plural: P,
    namespace: string,
    name: string,
  ): Promise<ResourceTypes[P]["output"]> {
    return this.#json("DELETE", resourcePath(plural, namespace, name)) as Promise<ResourceTypes[P]["output"]>;
  }

  /** One request to a HarnessSession's agent, answered when complete. */
  send(namespace: string, name: string, input: string, options: SendOptions = {}): Promise<HarnessReply> {
    const body = { input, stream: false, ...(options.id ? { id: options.id } : {}) };
    return this.#json("POST", requestsPath(namespace, name), body, options.signal) as Promise<HarnessReply>;
  }

  /**
   * One request with a streamed reply: its `delta` events as they arrive, then its `result`.
   * A failure (before or during the stream) throws a ClientError; aborting the signal cancels
   * the request at the agent.
   */
  async *sendStreaming(
    namespace: string,
    name: string,
    input: string,
    options: SendOptions = {},
  ): AsyncGenerator<StreamEvent> {
    const body = { input, stream: true, ...(options.id ? { id: options.id } : {}) };
    const response = await this.#send("POST", requestsPath(namespace, name), body, options.signal);
    if (!response.body) throw new ClientError("INTERNAL", "the server sent an empty streamed reply");
    for await (const message of readSse(response.body)) {
      const data = parseJson(message.data);
      if (message.event === "error") throw errorFromBody(data, undefined);
      if (message.event === "delta" || message.event === "tool" || message.event === "result")
        yield data as StreamEvent;
    }
  }

  /**
   * The base URL of the session's OpenAI-compatible API (`…/harnesssessions/{name}/openai/v1`),
   * for any OpenAI client: `new OpenAI({ baseURL: client.openAIBaseUrl("default", "chat"), apiKey: token })`.
   */
  openAIBaseUrl(namespace: string, name: string): string {
    return `${this.baseUrl}${resourcePath("harnesssessions", namespace, name)}/openai/v1`;
  }

  /**
   * Where a session's declared port is reached (issue 40): `…/harnesssessions/{name}/ports/{port}`
   * followed by `path` (the session's own path and query, from `/`). Any method, HTTP or WebSocket
   * (`ws:` for `http:`), with a token that opens the port: its own port scope, the session's chat,
   * the namespace's edit or admin.
   */
  portUrl(namespace: string, name: string, port: number, path = "/"): string {
    // Not contracts/session-ports.ts's portPath: the client is bundled for the browser (the UI).
    const base = `${this.baseUrl}${resourcePath("harnesssessions", namespace, name)}/ports/${port}`;
    return `${base}${path.startsWith("/") ? path : `/${path}`}`;
  }

  /**
   * `POST …/harnesssessions/{name}/porttokens` (issue 40): a short-lived token of that one port's
   * scope (default 15m, at most 24h), its secret answered this once with the port's URL. Minted
   * with the session's chat token, the namespace's edit or admin.
   */
  createPortToken(
    namespace: string,
    name: string,
    port: number,
    options: { ttl?: string } = {},
  ): Promise<CreatedToken & { url: string }> {
    return this.#json("POST", `${resourcePath("harnesssessions", namespace, name)}/porttokens`, {
      port,
      ...(options.ttl !== undefined ? { ttl: options.ttl } : {}),
    }) as Promise<CreatedToken & { url: string }>;
  }

  /**
   * `GET …/harnesssessions/{name}/metrics` (issue 40): what the session's workload uses now, read
   * from its engine (takes about a second: the CPU is measured over one). FAILED_PRECONDITION when it
   * has no running workload.
   */
  sessionMetrics(namespace: string, name: string): Promise<SessionMetricsReply> {
    return this.#json(
      "GET",
      `${resourcePath("harnesssessions", namespace, name)}/metrics`,
    ) as Promise<SessionMetricsReply>;
  }

  /**
   * `GET …/webhooks/{name}/deliveries`: the Webhook's recent delivery attempts, newest first (status
   * code or error, duration, attempt number, outcome).
   */
  webhookDeliveries(namespace: string, name: string): Promise<WebhookDeliveryList> {
    return this.#json(
      "GET",
      `${resourcePath("webhooks", namespace, name)}/deliveries`,
    ) as Promise<WebhookDeliveryList>;
  }

  /**
   * `GET …/harnesssessions/{name}/logs` (issue 42): the last lines of what the runner saw of the
   * session's processes (the workload's output and its agent's stderr), secrets redacted.
   */
  sessionLogs(namespace: string, name: string, options: SessionLogsOptions = {}): Promise<SessionLogsReply> {
    return this.#json(
      "GET",
      `${resourcePath("harnesssessions", namespace, name)}/logs${logsQuery(options)}`,
    ) as Promise<SessionLogsReply>;
  }

  /**
   * `GET …/logs?follow=true`: the tail, then new lines as they come, until the signal aborts (the
   * generator then ends) or the server ends the stream (an `error` event throws).
   */
  async *followSessionLogs(
    namespace: string,
    name: string,
    options: SessionLogsOptions & { signal?: AbortSignal } = {},
  ): AsyncGenerator<LogLine> {
    let response: Response;
    try {
      response = await this.#send(
        "GET",
        `${resourcePath("harnesssessions", namespace, name)}/logs${logsQuery({ ...options, follow: true })}`,
        undefined,
        options.signal,
        { accept: "text/event-stream" },
      );
    } catch (error) {
      if (options.signal?.aborted) return;
      throw error;
    }
    if (!response.body) return;
    try {
      for await (const message of readSse(response.body)) {
        const data = parseJson(message.data) as Record<string, unknown>;
        if (message.event === "error") throw errorFromBody(data, undefined);
        if (message.event === "logs") yield* (data as SessionLogsReply).lines;
      }
    } catch (error) {
      if (options.signal?.aborted) return;
      throw error;
    }
  }

  /** `POST …/requests/{id}/cancel`. */
  cancel(namespace: string, name: string, id: string): Promise<{ id: string; cancelling: true }> {
    return this.#json(
      "POST",
      `${requestsPath(namespace, name)}/${encodeURIComponent(id)}/cancel`,
      {},
    ) as Promise<{ id: string; cancelling: true }>;
  }

  /**
   * Follows `GET /v1/events`. When the stream drops (server restart, network) it reconnects with
   * `Last-Event-ID` of the last event seen, so nothing retained is lost or repeated; an error
   * answer (bad session id, bad token) throws at once. Ends when the signal aborts.
   */
  async *events(options: EventsOptions = {}): AsyncGenerator<EventMessage> {
    const maxReconnects = options.maxReconnects ?? 5;
    let delay = options.reconnectDelayMs ?? 500;
    let lastEventId = options.lastEventId;
    let failures = 0;
    const params = new URLSearchParams();
    if (options.sessionId) params.set("session_id", options.sessionId);
    if (options.harnessSession) {
      params.set("namespace", options.harnessSession.namespace);
      params.set("name", options.harnessSession.name);
    }
    const query = params.size > 0 ? `?${params}` : "";
    while (!options.signal?.aborted) {
      let response: Response;
      try {
        response = await this.#send("GET", `/v1/events${query}`, undefined, options.signal, {
          accept: "text/event-stream",
          ...(lastEventId !== undefined ? { "last-event-id": lastEventId } : {}),
        });
      } catch (error) {
        if (options.signal?.aborted) return;
        // Only an unreachable server is worth another try; an answered error is final.
        if (!(error instanceof ClientError) || error.status !== undefined || failures >= maxReconnects)
          throw error;
        failures++;
        options.onReconnect?.(failures, error);
        await sleep(delay, options.signal);
        delay = Math.min(delay * 2, 10_000);
        continue;
      }
      failures = 0;
      delay = options.reconnectDelayMs ?? 500;
      options.onOpen?.();
      let dropped: unknown = new Error("the server ended the event stream");
      try {
        if (!response.body) throw new ClientError("INTERNAL", "the server sent an empty event stream");
        for await (const message of readSse(response.body)) {
          const data = parseJson(message.data) as Record<string, unknown>;
          // The server ended the stream for a reason (its token expired or was revoked): final.
          if (message.event === "error") {
            dropped = errorFromBody(data, undefined);
            failures = maxReconnects;
            break;
          }
          if (message.event === "gap") {
            yield {
              kind: "gap",
              ...(data as {
                session_id: string;
                namespace?: string;
                name?: string;
                from_seq: number;
                to_seq: number;
              }),
            };
            continue;
          }
          if (message.id !== undefined) lastEventId = message.id;
          yield { kind: "frame", id: message.id ?? "", frame: data as EventFrame };
        }
      } catch (error) {
        dropped = error;
      }
      if (options.signal?.aborted) return;
      if (failures >= maxReconnects) throw dropped;
      failures++;
      options.onReconnect?.(failures, dropped);
      await sleep(delay, options.signal);
    }
  }

  /** `GET /v1/runners`: every runner that attached, with capacity, labels, load, connection and drain state. */
  /** One page of the runners, by name (`metadata.continue` names the next page). */
  runners(page: ListPage = {}): Promise<RunnerList> {
    const query = new URLSearchParams();
    if (page.limit !== undefined) query.set("limit", String(page.limit));
    if (page.continue !== undefined) query.set("continue", page.continue);
    return this.#json("GET", `/v1/runners${query.size > 0 ? `?${query}` : ""}`) as Promise<RunnerList>;
  }

  /** `GET /v1/runners/{runner}` by name or id. */
  runner(runner: string): Promise<RunnerInfo> {
    return this.#json("GET", `/v1/runners/${encodeURIComponent(runner)}`) as Promise<RunnerInfo>;
  }

  /** `POST /v1/runners/{runner}:drain`: no new placements on it; its live sessions stay. */
  drainRunner(runner: string): Promise<RunnerInfo> {
    return this.#json("POST", `/v1/runners/${encodeURIComponent(runner)}:drain`) as Promise<RunnerInfo>;
  }

  /** `POST /v1/runners/{runner}:undrain`: it takes placements again. */
  undrainRunner(runner: string): Promise<RunnerInfo> {
    return this.#json("POST", `/v1/runners/${encodeURIComponent(runner)}:undrain`) as Promise<RunnerInfo>;
  }

  /** `POST /v1/runners/{runner}/token`: a new credential for the runner (shown once); its old one stops working. */
  issueRunnerToken(runner: string): Promise<RunnerTokenIssued> {
    return this.#json(
      "POST",
      `/v1/runners/${encodeURIComponent(runner)}/token`,
    ) as Promise<RunnerTokenIssued>;
  }

  /** `DELETE /v1/runners/{runner}/token`: forget its credential (the name may register again). */
  revokeRunnerToken(runner: string): Promise<RunnerTokenRevoked> {
    return this.#json(
      "DELETE",
      `/v1/runners/${encodeURIComponent(runner)}/token`,
    ) as Promise<RunnerTokenRevoked>;
  }

  /** `GET …/harnesssessions/{name}/workspace/files?path=DIR`: one directory level of the workspace. */
  listWorkspaceFiles(namespace: string, name: string, path = ""): Promise<WorkspaceListing> {
    return this.#json(
      "GET",
      `${workspacePath(namespace, name)}/files?path=${encodeURIComponent(path)}`,
    ) as Promise<WorkspaceListing>;
  }

  /** `GET …/workspace/files/{path}` (a file's bytes) or `GET …/workspace:archive?path=` (a tar), streamed. */
  async downloadWorkspace(
    namespace: string,
    name: string,
    path: string,
    what: "file" | "archive" = "file",
  ): Promise<ReadableStream<Uint8Array>> {
    const url =
      what === "archive"
        ? `${workspacePath(namespace, name)}:archive?path=${encodeURIComponent(path)}`
        : `${workspacePath(namespace, name)}/files/${encodeURIComponent(path)}`;
    const response = await this.#send("GET", url);
    if (!response.body) throw new ClientError("INTERNAL", "the server sent an empty download");
    return response.body;
  }

  /** `GET …/workspace:diff`: a git diff of the session's checkout against its seeded commit, streamed. */
  async diffWorkspace(namespace: string, name: string): Promise<ReadableStream<Uint8Array>> {
    const response = await this.#send("GET", `${workspacePath(namespace, name)}:diff`);
    if (!response.body) throw new ClientError("INTERNAL", "the server sent an empty diff");
    return response.body;
  }

  /** `PUT …/workspace/files/{path}`: the content streamed as the body. */
  uploadWorkspaceFile(
    namespace: string,
    name: string,
    path: string,
    content: Uint8Array | ReadableStream<Uint8Array>,
  ): Promise<WorkspaceWriteResult> {
    return this.#json("PUT", `${workspacePath(namespace, name)}/files/${encodeURIComponent(path)}`, {
      raw: content,
    }) as Promise<WorkspaceWriteResult>;
  }

  /** `DELETE …/workspace/files/{path}`. */
  deleteWorkspaceFile(namespace: string, name: string, path: string): Promise<WorkspaceDeleteResult> {
    return this.#json(
      "DELETE",
      `${workspacePath(namespace, name)}/files/${encodeURIComponent(path)}`,
    ) as Promise<WorkspaceDeleteResult>;
  }

  /**
   * `POST …/harnesssessions/{name}:snapshot`: a SessionSnapshot of the session's volume (its files
   * and the agent's conversation), taken between two requests; answered once it is Ready.
   */
  snapshot(namespace: string, session: string, snapshot: string): Promise<SessionSnapshot> {
    return this.#json("POST", `${resourcePath("harnesssessions", namespace, session)}:snapshot`, {
      name: snapshot,
    }) as Promise<SessionSnapshot>;
  }

  /**
   * `POST …/harnesssessions/{name}:restore`: the session's volume back to the snapshot (stopped and
   * brought back around it); what happened after the snapshot is gone.
   */
  restore(
    namespace: string,
    session: string,
    snapshot: string,
  ): Promise<{ session: HarnessSession; snapshot: string; message: string }> {
    return this.#json("POST", `${resourcePath("harnesssessions", namespace, session)}:restore`, {
      snapshot,
    }) as Promise<{ session: HarnessSession; snapshot: string; message: string }>;
  }

  /**
   * A new HarnessSession forked from a snapshot (`spec.source.snapshotRef`): the snapshot's Agent
   * and runtime, its files and conversation; `spec` adds anything else (desiredState, idleTimeout …).
   */
  async fork(
    namespace: string,
    snapshot: string,
    session: string,
    spec: Partial<z.input<typeof HarnessSessionInput>["spec"]> = {},
  ): Promise<HarnessSession> {
    const from = await this.get("sessionsnapshots", namespace, snapshot);
    return this.create("harnesssessions", {
      // The literal, not the import: contracts/resources.ts is not for the browser bundle (node:crypto).
      apiVersion: "agent-sessions.dev/v1alpha1" satisfies typeof API_VERSION,
      kind: "HarnessSession",
      metadata: { name: session, namespace },
      spec: {
        agentRef: from.spec.agentRef,
        runtimeRef: from.spec.runtimeRef,
        ...spec,
        source: { snapshotRef: snapshot },
      },
    });
  }

  /** `GET …/sessionsnapshots/{name}/archive`: the snapshot as a gzip tar with its manifest, streamed. */
  async exportSnapshot(namespace: string, snapshot: string): Promise<ReadableStream<Uint8Array>> {
    const response = await this.#send(
      "GET",
      `${resourcePath("sessionsnapshots", namespace, snapshot)}/archive`,
    );
    if (!response.body) throw new ClientError("INTERNAL", "the server sent an empty archive");
    return response.body;
  }

  /**
   * `PUT …/sessionsnapshots/{name}/archive`: a snapshot archive (as exported, from any installation
   * or engine) imported as a SessionSnapshot of the namespace; `engine` picks a runner of that engine.
   */
  importSnapshot(
    namespace: string,
    snapshot: string,
    archive: Uint8Array | ReadableStream<Uint8Array>,
    options: { engine?: "docker" | "kubernetes" } = {},
  ): Promise<SessionSnapshot> {
    const query = options.engine ? `?engine=${options.engine}` : "";
    return this.#json("PUT", `${resourcePath("sessionsnapshots", namespace, snapshot)}/archive${query}`, {
      raw: archive,
    }) as Promise<SessionSnapshot>;
  }

  /**
   * `POST /v1/tokens` (admin): a scoped API token, its secret answered this once. A
   * `session:<ns>/<name>:chat` scope is bound to that HarnessSession as it is now (NOT_FOUND when
   * it does not exist); a session re-created under the name later is not the token's.
   */
  createToken(request: CreateTokenRequest): Promise<CreatedToken> {
    return this.#json("POST", "/v1/tokens", request) as Promise<CreatedToken>;
  }

  /** `GET /v1/tokens` (admin): every API token, never a secret. */
  listTokens(): Promise<TokenList> {
    return this.#json("GET", "/v1/tokens") as Promise<TokenList>;
  }

  /** `DELETE /v1/tokens/{name}` (admin): the token stops working at once. */
  revokeToken(name: string): Promise<{ name: string; revoked: true }> {
    return this.#json("DELETE", `/v1/tokens/${encodeURIComponent(name)}`) as Promise<{
      name: string;
      revoked: true;
    }>;
  }

  /**
   * Every namespace's objects of a kind (`GET /v1/{plural}`, page after page): needs the admin
   * scope. Snapshots are listed per namespace only.
   */
  async listAllNamespaces<P extends Exclude<ResourcePlural, "sessionsnapshots">>(
    plural: P,
    pageSize?: number,
  ): Promise<ResourceTypes[P]["output"][]> {
    const items: ResourceTypes[P]["output"][] = [];
    let next: string | undefined;
    do {
      const query = new URLSearchParams();
      if (pageSize !== undefined) query.set("limit", String(pageSize));
      if (next !== undefined) query.set("continue", next);
      const page = (await this.#json(
        "GET",
        `/v1/${plural}${query.size > 0 ? `?${query}` : ""}`,
      )) as ResourceList<ResourceTypes[P]["output"]>;
      items.push(...page.items);
      next = page.metadata?.continue;
    } while (next !== undefined);
    return items;
  }

  /**
   * Waits until the HarnessSession settled in `phase` (its latest spec observed): resolves with
   * it; Failed instead is FAILED_PRECONDITION, the deadline DEADLINE_EXCEEDED (client/wait-for.ts).
   */
  waitFor(
    namespace: string,
    name: string,
    phase: HarnessPhase,
    options: WaitForOptions = {},
  ): Promise<HarnessSession> {
    return waitFor(this, namespace, name, phase, options);
  }

  /** `GET /v1/version`: the server's version, API version and Node version. */
  version(): Promise<{ version: string; apiVersion: string; node: string }> {
    return this.#json("GET", "/v1/version") as Promise<{ version: string; apiVersion: string; node: string }>;
  }

  /** `GET /v1/whoami`: the token's name, id and scopes. */
  whoami(): Promise<WhoAmI> {
    return this.#json("GET", "/v1/whoami") as Promise<WhoAmI>;
  }

  /** `GET /openapi.json`. */
  openapi(): Promise<Record<string, unknown>> {
    return this.#json("GET", "/openapi.json") as Promise<Record<string, unknown>>;
  }

  /** `GET /metrics` (Prometheus text). */
  async metrics(): Promise<string> {
    return (await this.#send("GET", "/metrics")).text();
  }

  async #json(
    method: string,
    path: string,
    body?: unknown,
    signal?: AbortSignal,
    headers?: Record<string, string>,
  ): Promise<unknown> {
    const response = await this.#send(method, path, body, signal, headers);
    return response.json();
  }

  /** One HTTP exchange; a non-2xx answer or an unreachable server is a ClientError. */
  async #send(
    method: string,
    path: string,
    body?: unknown,
    signal?: AbortSignal,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    const url = `${this.baseUrl}${path}`;
    // `{raw}`: bytes or a stream sent as they are (uploads); anything else is JSON.
    // Typed as the body fetch takes: the DOM's BodyInit wants bytes over an ArrayBuffer, which a
    // Node Buffer is not to the type checker (it may be shared); both fetches send either.
    const raw = (body as { raw?: Uint8Array | ReadableStream<Uint8Array> } | undefined)?.raw as
      | NonNullable<RequestInit["body"]>
      | undefined;
    let response: Response;
    // Called unbound: a browser's fetch refuses any `this` but the window ("Illegal invocation").
    const fetchOf = this.#fetch;
    try {
      response = await fetchOf(url, {
        method,
        headers: {
          ...(this.#token ? { authorization: `Bearer ${this.#token}` } : {}),
          ...(raw !== undefined
            ? { "content-type": "application/octet-stream" }
            : body !== undefined
              ? { "content-type": "application/json" }
              : {}),
          ...headers,
        },
        ...(raw !== undefined
          ? { body: raw, duplex: "half" }
          : body !== undefined
            ? { body: JSON.stringify(body) }
            : {}),
        ...(signal ? { signal } : {}),
      });
    } catch (error) {
      if (signal?.aborted)
        throw new ClientError("CANCELLED", `${method} ${path} was cancelled`, { cause: error });
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw new ClientError(
        "UNAVAILABLE",
        `cannot reach ${this.baseUrl}: ${cause?.code ?? cause?.message ?? String(error)}`,
        { cause: error },
      );
    }
    if (response.ok) return response;
    const text = await response.text();
    throw errorFromBody(parseJson(text), response.status, text);
  }
}

function resourcePath(plural: ResourcePlural, namespace: string, name?: string): string {
  const base = `/v1/namespaces/${encodeURIComponent(namespace)}/${plural}`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
}

/** Options of `sessionLogs`: the last `tailLines` lines after `sinceTime`, at most `limitBytes`. */
export type SessionLogsOptions = {
  /** @default 500 (the server's) */
  tailLines?: number;
  /** @default 1 MiB (the server's) */
  limitBytes?: number;
  /** RFC 3339. */
  sinceTime?: string;
};

function logsQuery(options: SessionLogsOptions & { follow?: boolean }): string {
  const query = new URLSearchParams();
  if (options.tailLines !== undefined) query.set("tailLines", String(options.tailLines));
  if (options.limitBytes !== undefined) query.set("limitBytes", String(options.limitBytes));
  if (options.sinceTime !== undefined) query.set("sinceTime", options.sinceTime);
  if (options.follow) query.set("follow", "true");
  return query.size > 0 ? `?${query}` : "";
}

function workspacePath(namespace: string, name: string): string {
  return `${resourcePath("harnesssessions", namespace, name)}/workspace`;
}

function requestsPath(namespace: string, name: string): string {
  return `${resourcePath("harnesssessions", namespace, name)}/requests`;
}

/** `{code, message, details?}` as a ClientError; a body without a canonical code by its status. */
function errorFromBody(body: unknown, status: number | undefined, text = ""): ClientError {
  const b = body as { code?: unknown; message?: unknown; details?: unknown } | undefined;
  const code = b?.code;
  const details =
    b?.details && typeof b.details === "object" ? (b.details as Record<string, unknown>) : undefined;
  if (isErrorCode(code)) return new ClientError(code, String(b?.message ?? code), { status, details });
  const byStatus = (Object.entries(httpStatusOf) as [ErrorCode, number][]).find(([, s]) => s === status);
  return new ClientError(
    byStatus?.[0] ?? (status !== undefined && status < 500 ? "FAILED_PRECONDITION" : "INTERNAL"),
    `HTTP ${status ?? "?"}${text ? `: ${text.slice(0, 200)}` : ""}`,
    { status },
  );
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
