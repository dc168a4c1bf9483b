import { PortTokenRequest } from "../../contracts/session-ports.ts";
import { SessionMetricsReply } from "../../contracts/session-metrics.ts";
import { Webhook, WebhookDeliveryList } from "../../contracts/webhook.ts";
import { LOG_LIMIT_BYTES_MAX, LOG_TAIL_LINES_MAX, SessionLogsReply } from "../../contracts/session-logs.ts";
import { z } from "zod";
import { EventFrame, Frame } from "../../contracts/compass.ts";
import { StreamEvent } from "../../contracts/adapter.ts";
import { AgentRun, AgentRunInput } from "../../contracts/agent-run.ts";
import { ApiErrorBody } from "../../contracts/errors.ts";
import {
  HarnessReply,
  HarnessRequest,
  HarnessSession,
  HarnessSessionInput,
} from "../../contracts/harness-session.ts";
import {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ModelList,
  OpenAIErrorBody,
} from "../../contracts/openai-chat.ts";
import { API_VERSION, AgentRuntime, AgentView, AgentWrite, SkillPack } from "../../contracts/resources.ts";
import { MCPServerView, MCPServerWrite } from "../../contracts/mcp.ts";
import {
  RestoreRequest,
  SessionSnapshot,
  SnapshotManifest,
  SnapshotRequest,
} from "../../contracts/session-snapshot.ts";
import { CreatedToken, CreateTokenRequest, TokenInfo, TokenList, WhoAmI } from "../../contracts/access.ts";
import { Rpc, type RpcMethod } from "../../contracts/rpc.ts";
import { DEFAULT_PAGE_SIZE, ListMetadata, MAX_PAGE_SIZE } from "../../contracts/pagination.ts";
import { RunnerInfo, RunnerList, RunnerTokenIssued, RunnerTokenRevoked } from "../../contracts/runners.ts";
import {
  WorkspaceDeleteResult,
  WorkspaceListing,
  WorkspaceWriteResult,
} from "../../contracts/workspace-files.ts";

/** A JSON Schema / OpenAPI object as plain JSON. */
export type JsonObject = { [key: string]: unknown };

/**
 * JSON Schema (draft 2020-12, the dialect of OpenAPI 3.1) of a zod contract. Requests are
 * described as the server accepts them (`io: "input"`: fields with defaults are optional),
 * replies as it sends them. Refinements zod cannot express (e.g. "exactly one of value or
 * secretRef") are not in the schema; the server still enforces them and says which field failed.
 */
function schemaOf(schema: z.ZodType, io: "input" | "output"): JsonObject {
  const { $schema: _dialect, ...json } = z.toJSONSchema(schema, {
    target: "draft-2020-12",
    io,
    unrepresentable: "any",
  }) as JsonObject;
  return json;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: JsonObject) => ({ "application/json": { schema } });
const ok = (description: string, schema: JsonObject) => ({ description, content: json(schema) });
/** Every error is `{code, message, details?}` with the usual gRPC → HTTP status mapping. */
const errors = {
  "4XX": { $ref: "#/components/responses/Error" },
  "5XX": { $ref: "#/components/responses/Error" },
};

/** The resource kinds of `/v1/namespaces/{namespace}/{plural}`, as documented. */
const RESOURCES = [
  { plural: "agentruntimes", kind: "AgentRuntime", input: AgentRuntime, output: AgentRuntime, patch: false },
  // Credentials are write-only: the answer says `valueSet: true` where a literal value is stored,
  // and a PUT may send `valueSet: true` back to keep it.
  { plural: "agents", kind: "Agent", input: AgentWrite, output: AgentView, patch: false },
  // MCP servers for sessions (issue 39): Streamable HTTP only; credentials write-only like an Agent's.
  { plural: "mcpservers", kind: "MCPServer", input: MCPServerWrite, output: MCPServerView, patch: false },
  // Markdown only: Sympozium's sidecar, hostAccess, rbac, clusterRBAC, runtimeRequirements are
  // refused (400 INVALID_ARGUMENT naming the invariant; contracts/skill-pack.ts).
  { plural: "skillpacks", kind: "SkillPack", input: SkillPack, output: SkillPack, patch: false },
  {
    plural: "harnesssessions",
    kind: "HarnessSession",
    input: HarnessSessionInput,
    output: HarnessSession,
    patch: true,
  },
] as const;

const nsParam = {
  name: "namespace",
  in: "path",
  required: true,
  schema: { type: "string", pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" },
};
const nameParam = { ...nsParam, name: "name" };
/** `?limit=&continue=` of every list route (contracts/pagination.ts). */
const pageParams = [
  {
    name: "limit",
    in: "query",
    description: `items per page (default ${DEFAULT_PAGE_SIZE})`,
    schema: { type: "integer", minimum: 1, maximum: MAX_PAGE_SIZE },
  },
  {
    name: "continue",
    in: "query",
    description: "the `metadata.continue` of the previous page; none for the first",
    schema: { type: "string", pattern: "^[A-Za-z0-9_-]+$", maxLength: 2048 },
  },
];

function componentSchemas(): Record<string, JsonObject> {
  const schemas: Record<string, JsonObject> = { Error: schemaOf(ApiErrorBody, "output") };
  for (const [method, { request, response }] of Object.entries(Rpc)) {
    schemas[`${method}Request`] = schemaOf(request, "input");
    schemas[`${method}Response`] = schemaOf(response, "output");
  }
  for (const r of RESOURCES) {
    schemas[r.kind] = schemaOf(r.output, "output");
    schemas[`${r.kind}Input`] = schemaOf(r.input, "input");
    schemas[`${r.kind}List`] = {
      type: "object",
      properties: {
        apiVersion: { type: "string", const: API_VERSION },
        kind: { type: "string", const: `${r.kind}List` },
        metadata: schemaOf(ListMetadata, "output"),
        items: { type: "array", items: ref(r.kind) },
      },
      required: ["apiVersion", "kind", "items"],
    };
  }
  schemas.HarnessRequest = schemaOf(HarnessRequest, "input");
  schemas.HarnessReply = schemaOf(HarnessReply, "output");
  schemas.StreamEvent = schemaOf(StreamEvent, "output");
  schemas.ChatCompletionRequest = schemaOf(ChatCompletionRequest, "input");
  schemas.ChatCompletion = schemaOf(ChatCompletion, "output");
  schemas.ChatCompletionChunk = schemaOf(ChatCompletionChunk, "output");
  schemas.ModelList = schemaOf(ModelList, "output");
  schemas.SessionMetrics = schemaOf(SessionMetricsReply, "output");
  schemas.SessionLogs = schemaOf(SessionLogsReply, "output");
  schemas.OpenAIError = schemaOf(OpenAIErrorBody, "output");
  schemas.AgentRunInput = schemaOf(AgentRunInput, "input");
  schemas.AgentRun = schemaOf(AgentRun, "output");
  schemas.Frame = schemaOf(Frame, "output");
  schemas.EventFrame = schemaOf(EventFrame, "output");
  schemas.RunnerInfo = schemaOf(RunnerInfo, "output");
  schemas.RunnerList = schemaOf(RunnerList, "output");
  schemas.RunnerTokenIssued = schemaOf(RunnerTokenIssued, "output");
  schemas.RunnerTokenRevoked = schemaOf(RunnerTokenRevoked, "output");
  schemas.SessionSnapshot = schemaOf(SessionSnapshot, "output");
  schemas.SessionSnapshotList = {
    type: "object",
    properties: {
      apiVersion: { type: "string", const: API_VERSION },
      kind: { type: "string", const: "SessionSnapshotList" },
      metadata: schemaOf(ListMetadata, "output"),
      items: { type: "array", items: ref("SessionSnapshot") },
    },
    required: ["apiVersion", "kind", "items"],
  };
  schemas.SnapshotRequest = schemaOf(SnapshotRequest, "input");
  schemas.RestoreRequest = schemaOf(RestoreRequest, "input");
  schemas.SnapshotManifest = schemaOf(SnapshotManifest, "output");
  schemas.WorkspaceListing = schemaOf(WorkspaceListing, "output");
  schemas.WorkspaceWriteResult = schemaOf(WorkspaceWriteResult, "output");
  schemas.WorkspaceDeleteResult = schemaOf(WorkspaceDeleteResult, "output");
  schemas.CreateTokenRequest = schemaOf(CreateTokenRequest, "input");
  schemas.CreatedToken = schemaOf(CreatedToken, "output");
  schemas.TokenInfo = schemaOf(TokenInfo, "output");
  schemas.TokenList = schemaOf(TokenList, "output");
  schemas.WhoAmI = schemaOf(WhoAmI, "output");
  schemas.Webhook = schemaOf(Webhook, "output");
  schemas.WebhookInput = schemaOf(Webhook, "input");
  schemas.WebhookList = {
    type: "object",
    properties: {
      apiVersion: { type: "string", const: API_VERSION },
      kind: { type: "string", const: "WebhookList" },
      metadata: schemaOf(ListMetadata, "output"),
      items: { type: "array", items: ref("Webhook") },
    },
    required: ["apiVersion", "kind", "items"],
  };
  schemas.WebhookDeliveryList = schemaOf(WebhookDeliveryList, "output");
  return schemas;
}

/**
 * The scope each RPC needs (proxy/http/rpc-access.ts). A container or session the token may not
 * read answers as one that does not exist; one it may read but not write is 403.
 */
const HIDDEN =
  "A container or session of a namespace the token may not read answers exactly as a missing one";
const RPC_SCOPES: Record<RpcMethod, string> = {
  ProvisionAgentWorkspace: "Scope: namespace:<ns>:edit of agent_ref's namespace (or admin).",
  SpawnAgent: "Scope: namespace:<ns>:edit of agent_ref's namespace (or admin).",
  StartAgentSession: `Scope: namespace:<ns>:edit of the namespace owning container_name (or admin). ${HIDDEN} (404 NOT_FOUND).`,
  StopAgentSession: `Scope: namespace:<ns>:edit of the namespace owning session_id (or admin). ${HIDDEN} (200 STOPPED, as the idempotent stop).`,
  ReloadAgentSession: `Scope: namespace:<ns>:edit of the namespace owning session_id (or admin). ${HIDDEN} (404 NOT_FOUND).`,
  SendAgentMessage: `Scope: namespace:<ns>:edit of the namespace owning session_id (or admin). ${HIDDEN} (404 NOT_FOUND).`,
  RemoveAgentWorkspace: `Scope: namespace:<ns>:edit of the namespace owning container_name (or admin). ${HIDDEN} (200 removed: false).`,
  GetAgentStatus:
    "Scope: with session_id, namespace:<ns>:view or :edit of the owning namespace, or session:<ns>/<name>:chat when the session runs a HarnessSession's workspace (a missing or hidden one is 404); without it, any token: the sessions of the namespaces it can view (admin: all), paginated.",
};

function rpcPaths(): Record<string, JsonObject> {
  const paths: Record<string, JsonObject> = {};
  for (const method of Object.keys(Rpc) as RpcMethod[]) {
    paths[`/v1/rpc/${method}`] = {
      post: {
        operationId: method,
        tags: ["rpc"],
        description: RPC_SCOPES[method],
        requestBody: { required: true, content: json(ref(`${method}Request`)) },
        responses: { "200": ok(`${method} succeeded`, ref(`${method}Response`)), ...errors },
      },
    };
  }
  return paths;
}

function resourcePaths(): Record<string, JsonObject> {
  const paths: Record<string, JsonObject> = {};
  for (const r of RESOURCES) {
    const base = `/v1/namespaces/{namespace}/${r.plural}`;
    paths[base] = {
      parameters: [nsParam],
      get: {
        operationId: `list${r.kind}s`,
        tags: [r.plural],
        parameters: pageParams,
        responses: { "200": ok(`the ${r.kind}s of the namespace`, ref(`${r.kind}List`)), ...errors },
      },
    };
    const one: JsonObject = {
      parameters: [nsParam, nameParam],
      get: {
        operationId: `get${r.kind}`,
        tags: [r.plural],
        responses: { "200": ok(`the ${r.kind}`, ref(r.kind)), ...errors },
      },
      put: {
        operationId: `put${r.kind}`,
        tags: [r.plural],
        description:
          "Create or replace (kubectl-style manifest). metadata.name and metadata.namespace may be left out; when given they must match the path. With `If-None-Match: *` it only creates: a name in use is 409 ALREADY_EXISTS and nothing changes.",
        parameters: [
          {
            name: "If-None-Match",
            in: "header",
            required: false,
            description: "`*`: create only, never replace",
            schema: { type: "string", enum: ["*"] },
          },
        ],
        requestBody: { required: true, content: json(ref(`${r.kind}Input`)) },
        responses: {
          "200": ok("replaced", ref(r.kind)),
          "201": ok("created", ref(r.kind)),
          ...errors,
        },
      },
      delete: {
        operationId: `delete${r.kind}`,
        tags: [r.plural],
        responses: { "200": ok(`the deleted ${r.kind}`, ref(r.kind)), ...errors },
      },
    };
    if (r.patch)
      one.patch = {
        operationId: `patch${r.kind}`,
        tags: [r.plural],
        description:
          "JSON merge patch (RFC 7386) of the manifest, e.g. {spec: {desiredState: stopped}}. status is ignored; immutable spec fields cannot change.",
        requestBody: {
          required: true,
          content: {
            "application/merge-patch+json": { schema: { type: "object" } },
            "application/json": { schema: { type: "object" } },
          },
        },
        responses: { "200": ok(`the patched ${r.kind}`, ref(r.kind)), ...errors },
      };
    paths[`${base}/{name}`] = one;
  }
  paths["/v1/namespaces/{namespace}/harnesssessions/{name}/requests"] = {
    parameters: [nsParam, nameParam],
    post: {
      operationId: "sendRequest",
      tags: ["harnesssessions"],
      description:
        "The proxy: relays one request to the session's agent. Only Ready sessions accept requests (FAILED_PRECONDITION otherwise). With stream: true (runtimes declaring `streaming`) the reply is server-sent events: `event: delta` ({type, text}) ..., then `event: result` ({type, result}); a failure after the first event is `event: error` ({code, message}).",
      requestBody: { required: true, content: json(ref("HarnessRequest")) },
      responses: {
        "200": {
          description: "the agent's result record, or (stream: true) its events",
          content: {
            "application/json": { schema: ref("HarnessReply") },
            "text/event-stream": { schema: ref("StreamEvent") },
          },
        },
        ...errors,
      },
    },
  };
  paths["/v1/namespaces/{namespace}/harnesssessions/{name}/requests/{id}/cancel"] = {
    parameters: [nsParam, nameParam, { ...nameParam, name: "id" }],
    post: {
      operationId: "cancelRequest",
      tags: ["harnesssessions"],
      responses: {
        "202": ok("cancellation sent to the agent", {
          type: "object",
          properties: { id: { type: "string" }, cancelling: { type: "boolean", const: true } },
          required: ["id", "cancelling"],
        }),
        ...errors,
      },
    },
  };
  // A session's OpenAI-compatible API (issue 41): its errors are in OpenAI's shape.
  const openAIErrors = {
    "4XX": {
      description: "OpenAI's error shape; code is the gRPC canonical code",
      content: json(ref("OpenAIError")),
    },
    "5XX": {
      description: "OpenAI's error shape; code is the gRPC canonical code",
      content: json(ref("OpenAIError")),
    },
  };
  paths["/v1/namespaces/{namespace}/harnesssessions/{name}/openai/v1/chat/completions"] = {
    parameters: [nsParam, nameParam],
    post: {
      operationId: "createChatCompletion",
      tags: ["harnesssessions"],
      description:
        "Scope: session:<ns>/<name>:chat or namespace:<ns>:edit. OpenAI's Chat Completions API over the session's request relay (same accounting, audit, auto-resume and limits as …/requests). The last user message is the turn sent to the agent; earlier messages are the client's view and are not sent (the session keeps its own conversation). Content: a string or text parts; n must be 1; model is echoed, the Agent's model answers. stream: true answers data: <chat.completion.chunk> events, the usage chunk when stream_options.include_usage, then data: [DONE].",
      requestBody: { required: true, content: json(ref("ChatCompletionRequest")) },
      responses: {
        "200": {
          description:
            "a chat.completion, or (stream: true) chat.completion.chunk events ending data: [DONE]",
          content: {
            "application/json": { schema: ref("ChatCompletion") },
            "text/event-stream": { schema: ref("ChatCompletionChunk") },
          },
        },
        ...openAIErrors,
      },
    },
  };
  paths["/v1/namespaces/{namespace}/harnesssessions/{name}/openai/v1/models"] = {
    parameters: [nsParam, nameParam],
    get: {
      operationId: "listSessionModels",
      tags: ["harnesssessions"],
      description:
        "Scope: session:<ns>/<name>:chat or namespace:<ns>:edit. The one model the session answers as: its name.",
      responses: { "200": ok("the session as a model", ref("ModelList")), ...openAIErrors },
    },
  };
  paths["/v1/namespaces/{namespace}/harnesssessions/{name}/metrics"] = {
    parameters: [nsParam, nameParam],
    get: {
      operationId: "readSessionMetrics",
      tags: ["harnesssessions"],
      description:
        "Scope: namespace:<ns>:view or session:<ns>/<name>:view (or chat). What the session's workload uses now, read from the engine (CPU over about a second, memory, network, volume); not activity. 412 FAILED_PRECONDITION when it has no running workload.",
      responses: { "200": ok("the session's metrics", ref("SessionMetrics")), ...errors },
    },
  };
  paths["/v1/namespaces/{namespace}/harnesssessions/{name}/logs"] = {
    parameters: [nsParam, nameParam],
    get: {
      operationId: "readSessionLogs",
      tags: ["harnesssessions"],
      description:
        "Scope: namespace:<ns>:view or session:<ns>/<name>:view (or chat). What the runner saw of the session's processes: the workload's output as the engine keeps it and the agent's stderr, merged by time, secrets redacted. With follow=true, server-sent `logs` events (the tail, then new lines) until the client leaves.",
      parameters: [
        {
          name: "tailLines",
          in: "query",
          schema: { type: "integer", minimum: 0, maximum: LOG_TAIL_LINES_MAX, default: 500 },
        },
        {
          name: "limitBytes",
          in: "query",
          schema: { type: "integer", minimum: 1, maximum: LOG_LIMIT_BYTES_MAX },
        },
        { name: "sinceTime", in: "query", schema: { type: "string", format: "date-time" } },
        { name: "follow", in: "query", schema: { type: "string", enum: ["true", "false"] } },
      ],
      responses: { "200": ok("the session's logs", ref("SessionLogs")), ...errors },
    },
  };
  paths["/v1/version"] = {
    get: {
      operationId: "readVersion",
      description: "Any valid token. The server's version, API version and Node version.",
      responses: {
        "200": ok("the versions", {
          type: "object",
          properties: {
            version: { type: "string" },
            apiVersion: { type: "string" },
            node: { type: "string" },
          },
        }),
        ...errors,
      },
    },
  };
  paths["/v1/namespaces/{namespace}/agentruns"] = {
    parameters: [nsParam],
    post: {
      operationId: "runAgent",
      tags: ["agentruns"],
      description: "Runs a one-shot (contract v1alpha1) runtime to completion.",
      requestBody: { required: true, content: json(ref("AgentRunInput")) },
      responses: { "201": ok("the finished run", ref("AgentRun")), ...errors },
    },
  };
  return paths;
}

/**
 * The workspace files API (issue 18), the same operations under a HarnessSession and an RPC
 * workspace (`/v1/workspaces/{container_name}`).
 */
function workspacePaths(): Record<string, JsonObject> {
  const paths: Record<string, JsonObject> = {};
  const pathQuery = {
    name: "path",
    in: "query",
    required: false,
    description: "a directory under /workspace (relative, or absolute under /workspace); default /workspace",
    schema: { type: "string" },
  };
  const filePath = {
    name: "path",
    in: "path",
    required: true,
    description:
      "a path under /workspace; `..`, other absolute paths and symlinks leading out are 400 INVALID_ARGUMENT",
    schema: { type: "string" },
  };
  const bytes = { "application/octet-stream": { schema: { type: "string", format: "binary" } } };
  const tooLarge = {
    "413": {
      description: "RESOURCE_EXHAUSTED: past AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES",
      content: json(ref("Error")),
    },
  };
  const stopped =
    "A session without a running workload (stopped) answers FAILED_PRECONDITION: resume it first.";
  // Who may: reads (list, download, archive) and writes (upload, delete).
  const bases: [string, JsonObject[], string, { read: string; write: string }][] = [
    [
      "/v1/namespaces/{namespace}/harnesssessions/{name}/workspace",
      [nsParam, nameParam],
      "Session",
      {
        read: "Scope: namespace:<ns>:view or :edit, or session:<ns>/<name>:chat of this session.",
        write: "Scope: namespace:<ns>:edit.",
      },
    ],
    [
      "/v1/workspaces/{container_name}/workspace",
      [{ ...nameParam, name: "container_name", schema: { type: "string" } }],
      "RpcWorkspace",
      {
        read: "Scope: namespace:<ns>:view or :edit of the namespace owning the container, or the chat scope of the HarnessSession it serves; a hidden one is 404 like a missing one.",
        write:
          "Scope: namespace:<ns>:edit of the namespace owning the container; a hidden one is 404 like a missing one.",
      },
    ],
  ];
  for (const [base, parameters, suffix, scope] of bases) {
    paths[`${base}/files`] = {
      parameters,
      get: {
        operationId: `listWorkspaceFiles${suffix}`,
        tags: ["workspace"],
        description: `One directory level: name, type, size, mtime. ${stopped} ${scope.read}`,
        parameters: [pathQuery],
        responses: { "200": ok("the directory's entries", ref("WorkspaceListing")), ...errors },
      },
    };
    paths[`${base}/files/{path}`] = {
      parameters: [...parameters, filePath],
      get: {
        operationId: `downloadWorkspaceFile${suffix}`,
        tags: ["workspace"],
        description: `A file's bytes, streamed. ${stopped} ${scope.read}`,
        responses: { "200": { description: "the file", content: bytes }, ...tooLarge, ...errors },
      },
      put: {
        operationId: `uploadWorkspaceFile${suffix}`,
        tags: ["workspace"],
        description: `Writes the body as the file (missing parent directories are created), all at once when the whole body arrived. ${scope.write}`,
        requestBody: { required: true, content: bytes },
        responses: { "201": ok("written", ref("WorkspaceWriteResult")), ...tooLarge, ...errors },
      },
      delete: {
        operationId: `deleteWorkspaceFile${suffix}`,
        tags: ["workspace"],
        description: `Deletes a file or a directory tree (a symlink itself, never its target). ${scope.write}`,
        responses: { "200": ok("deleted", ref("WorkspaceDeleteResult")), ...errors },
      },
    };
    paths[`${base}:archive`] = {
      parameters,
      get: {
        operationId: `archiveWorkspace${suffix}`,
        tags: ["workspace"],
        description: `A tar of a path (default the whole workspace), streamed. ${stopped} ${scope.read}`,
        parameters: [pathQuery],
        responses: {
          "200": {
            description: "a tar archive",
            content: { "application/x-tar": { schema: { type: "string", format: "binary" } } },
          },
          ...tooLarge,
          ...errors,
        },
      },
    };
    paths[`${base}:diff`] = {
      parameters,
      get: {
        operationId: `diffWorkspace${suffix}`,
        tags: ["workspace"],
        description: `A git diff of the workspace's checkout against the commit its workstream's repository was seeded from (untracked files included), streamed. FAILED_PRECONDITION when the workspace was not seeded from a repository. Works on a stopped session too. ${scope.read}`,
        responses: {
          "200": {
            description: "a unified diff",
            content: { "text/x-diff": { schema: { type: "string" } } },
          },
          ...tooLarge,
          ...errors,
        },
      },
    };
  }
  return paths;
}

/** The runner admin API: list, drain, undrain, credentials (admin token; runners themselves only dial /v1/runners/connect). */
function runnerPaths(): Record<string, JsonObject> {
  const runnerParam = {
    name: "runner",
    in: "path",
    required: true,
    description: "the runner's name (`agent-sessions runner --name`) or id",
    schema: { type: "string", pattern: "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", maxLength: 128 },
  };
  const action = (verb: "drain" | "undrain", description: string) => ({
    parameters: [runnerParam],
    post: {
      operationId: `${verb}Runner`,
      tags: ["runners"],
      description,
      responses: { "200": ok(`the runner after ${verb}`, ref("RunnerInfo")), ...errors },
    },
  });
  return {
    "/v1/runners": {
      get: {
        operationId: "listRunners",
        tags: ["runners"],
        parameters: pageParams,
        description:
          "Every runner that has attached to this server: capacity, labels, load (workspaces placed on it), live sessions, connected, draining.",
        responses: { "200": ok("the runners", ref("RunnerList")), ...errors },
      },
    },
    "/v1/runners/{runner}": {
      parameters: [runnerParam],
      get: {
        operationId: "getRunner",
        tags: ["runners"],
        responses: { "200": ok("the runner", ref("RunnerInfo")), ...errors },
      },
    },
    "/v1/runners/{runner}:drain": action(
      "drain",
      "No new workspace is placed on the runner; its live sessions stay and keep serving. Idempotent; kept across server restarts.",
    ),
    "/v1/runners/{runner}:undrain": action(
      "undrain",
      "The runner takes new placements again; HarnessSessions waiting for a runner are reconsidered.",
    ),
    "/v1/runners/{runner}/token": {
      parameters: [{ ...runnerParam, description: "the runner's name (it need not have attached yet)" }],
      post: {
        operationId: "issueRunnerToken",
        tags: ["runners"],
        description:
          "A new credential for the runner (shown once, kept only as a hash). Its older credential stops working and its live link is closed; the runner presents the new one as its bearer.",
        responses: { "201": ok("the credential", ref("RunnerTokenIssued")), ...errors },
      },
      delete: {
        operationId: "revokeRunnerToken",
        tags: ["runners"],
        description:
          "Forget the runner's credential and close its live link; the name may then register again with the runner token.",
        responses: { "200": ok("whether a credential was revoked", ref("RunnerTokenRevoked")), ...errors },
      },
    },
  };
}

/** Scoped API tokens (admin only) and `whoami` (any token). */
function tokenPaths(): Record<string, JsonObject> {
  return {
    "/v1/tokens": {
      post: {
        operationId: "createToken",
        tags: ["tokens"],
        description:
          "Admin only. A scoped API token: scopes admin, namespace:<ns>:edit, namespace:<ns>:view, session:<ns>/<name>:chat; ttl a duration (a session-only token defaults to 1h, others never expire). The secret is answered this once; the server keeps its SHA-256 only.",
        requestBody: { required: true, content: json(ref("CreateTokenRequest")) },
        responses: { "201": ok("the token, with its secret", ref("CreatedToken")), ...errors },
      },
      get: {
        operationId: "listTokens",
        tags: ["tokens"],
        description: "Admin only. Every API token: name, id, scopes, expiry; never a secret.",
        responses: { "200": ok("the tokens", ref("TokenList")), ...errors },
      },
    },
    "/v1/tokens/{name}": {
      parameters: [{ ...nameParam, description: "the token's name" }],
      delete: {
        operationId: "revokeToken",
        tags: ["tokens"],
        description: "Admin only. The token stops working at once (401 from then on).",
        responses: {
          "200": ok("revoked", {
            type: "object",
            properties: { name: { type: "string" }, revoked: { const: true } },
            required: ["name", "revoked"],
          }),
          ...errors,
        },
      },
    },
    "/v1/whoami": {
      get: {
        operationId: "whoami",
        tags: ["tokens"],
        description: "Any token: its name, id and scopes (the admin token is `admin`).",
        responses: { "200": ok("the caller", ref("WhoAmI")), ...errors },
      },
    },
  };
}

function operationalPaths(): Record<string, JsonObject> {
  const status = (value: string) => ({
    type: "object",
    properties: { status: { type: "string", const: value } },
    required: ["status"],
  });
  return {
    "/healthz": {
      get: { operationId: "healthz", security: [], responses: { "200": ok("alive", status("ok")) } },
    },
    "/readyz": {
      get: {
        operationId: "readyz",
        security: [],
        description:
          "503 when the store is not open. 200 otherwise, with `status: no_runner` and a `message` while no runner takes work (sessions stay Pending).",
        responses: {
          "200": ok("ready, or waiting for a runner", {
            type: "object",
            properties: {
              status: { type: "string", enum: ["ready", "no_runner"] },
              runners: {
                type: "object",
                properties: { connected: { type: "integer" }, accepting: { type: "integer" } },
              },
              message: { type: "string" },
            },
            required: ["status"],
          }),
          ...errors,
        },
      },
    },
    "/openapi.json": {
      get: {
        operationId: "openapi",
        security: [],
        responses: { "200": ok("this document", { type: "object" }) },
      },
    },
    "/metrics": {
      get: {
        operationId: "metrics",
        description:
          "Prometheus text exposition. Takes the admin token unless the server runs with AGENT_SESSIONS_METRICS_PUBLIC=true.",
        responses: {
          "200": {
            description: "metrics",
            content: { "text/plain; version=0.0.4": { schema: { type: "string" } } },
          },
          ...errors,
        },
      },
    },
    "/v1/events": {
      get: {
        operationId: "events",
        tags: ["events"],
        description:
          "compass.v1 frames (status transitions included) as server-sent events, `data:` one EventFrame: the stored Frame plus `namespace` (its session's Agent's) and `name` (the HarnessSession the agent session runs for; absent for a session opened over the RPC API). With session_id the event id is the session's seq, else the store's global frame id. Last-Event-ID (or last_event_id) resumes after that id without loss; without it the stream starts with the next frame. `event: gap` ({session_id, namespace, name, from_seq, to_seq}; namespace and name as on the frames) names frames already trimmed. A scoped token sees only the sessions it may (a namespace token its namespace's, a session token its session's); another's session_id is 404 like an unknown one.",
        parameters: [
          { name: "session_id", in: "query", schema: { type: "string", minLength: 1, maxLength: 128 } },
          {
            name: "namespace",
            in: "query",
            description: "with name: one HarnessSession's frames, every agent session it ran",
            schema: { type: "string" },
          },
          { name: "name", in: "query", schema: { type: "string" } },
          { name: "last_event_id", in: "query", schema: { type: "integer", minimum: 0 } },
          { name: "Last-Event-ID", in: "header", schema: { type: "integer", minimum: 0 } },
        ],
        responses: {
          "200": {
            description: "the event stream",
            content: { "text/event-stream": { schema: ref("EventFrame") } },
          },
          ...errors,
        },
      },
    },
  };
}

/** SessionSnapshots (issue 38; docs/http-api.md): snapshot, restore, read, delete, archive. */
function snapshotPaths(): Record<string, JsonObject> {
  const edit = "Scope: namespace:<ns>:edit (a chat token can do none of this).";
  const base = "/v1/namespaces/{namespace}/sessionsnapshots";
  const gzip = { "application/gzip": { schema: { type: "string", format: "binary" } } };
  const tooLarge = {
    "413": {
      description: "RESOURCE_EXHAUSTED: past AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES",
      content: json(ref("Error")),
    },
  };
  return {
    "/v1/namespaces/{namespace}/harnesssessions/{name}:snapshot": {
      parameters: [nsParam, nameParam],
      post: {
        operationId: "snapshotSession",
        tags: ["sessionsnapshots"],
        description: `Copies the session's volume (its files and its conversation) into a new SessionSnapshot, running, paused or stopped; answers once Ready. Requests in flight that do not end within 30 s: 409 ABORTED, nothing kept. A session never provisioned: 412. ${edit}`,
        requestBody: { required: true, content: json(ref("SnapshotRequest")) },
        responses: { "201": ok("the snapshot, Ready", ref("SessionSnapshot")), ...errors },
      },
    },
    "/v1/namespaces/{namespace}/harnesssessions/{name}:restore": {
      parameters: [nsParam, nameParam],
      post: {
        operationId: "restoreSession",
        tags: ["sessionsnapshots"],
        description: `Returns the session's volume to a snapshot (Ready, same namespace, Agent and runtime, on the session's runner; else 400 naming the mismatch): the session is stopped, restored, and brought back to its desired state. ${edit}`,
        requestBody: { required: true, content: json(ref("RestoreRequest")) },
        responses: {
          "200": ok("the session after the restore", {
            type: "object",
            properties: {
              session: ref("HarnessSession"),
              snapshot: { type: "string" },
              message: { type: "string" },
            },
            required: ["session", "snapshot", "message"],
          }),
          ...errors,
        },
      },
    },
    [base]: {
      parameters: [nsParam],
      get: {
        operationId: "listSessionSnapshots",
        tags: ["sessionsnapshots"],
        parameters: pageParams,
        description: "Scope: namespace:<ns>:view or :edit.",
        responses: { "200": ok("a page of snapshots, by name", ref("SessionSnapshotList")), ...errors },
      },
    },
    [`${base}/{name}`]: {
      parameters: [nsParam, nameParam],
      get: {
        operationId: "getSessionSnapshot",
        tags: ["sessionsnapshots"],
        description: "Scope: namespace:<ns>:view or :edit.",
        responses: { "200": ok("the snapshot", ref("SessionSnapshot")), ...errors },
      },
      delete: {
        operationId: "deleteSessionSnapshot",
        tags: ["sessionsnapshots"],
        description: `Frees the snapshot's storage on its runner, then forgets it. Its runner not connected: 503, the snapshot kept. ${edit}`,
        responses: { "200": ok("the deleted snapshot", ref("SessionSnapshot")), ...errors },
      },
    },
    [`${base}/{name}/archive`]: {
      parameters: [nsParam, nameParam],
      get: {
        operationId: "exportSessionSnapshot",
        tags: ["sessionsnapshots"],
        description: `A gzip-compressed tar: manifest.json (SnapshotManifest) first, then the volume's files under volume/. ${edit}`,
        responses: { "200": { description: "the archive", content: gzip }, ...tooLarge, ...errors },
      },
      put: {
        operationId: "importSessionSnapshot",
        tags: ["sessionsnapshots"],
        description: `Imports an archive as exported: checked whole before anything is made (manifest first; only files, directories and symlinks under volume/ that stay inside; no hard links, devices, FIFOs; not truncated: else 400). ${edit}`,
        parameters: [
          {
            name: "engine",
            in: "query",
            required: false,
            description: "prefer a runner of this engine",
            schema: { type: "string", enum: ["docker", "kubernetes"] },
          },
        ],
        requestBody: { required: true, content: gzip },
        responses: {
          "201": ok("the imported snapshot, Ready", ref("SessionSnapshot")),
          ...tooLarge,
          ...errors,
        },
      },
    },
  };
}

/** Webhooks (issue 40; docs/webhooks.md): signed lifecycle deliveries and their recent attempts. */
function webhookPaths(): Record<string, JsonObject> {
  const base = "/v1/namespaces/{namespace}/webhooks";
  const view = "Scope: namespace:<ns>:view or :edit (a chat token can do nothing with Webhooks).";
  const edit = "Scope: namespace:<ns>:edit (a chat token can do nothing with Webhooks).";
  return {
    [base]: {
      parameters: [nsParam],
      get: {
        operationId: "listWebhooks",
        tags: ["webhooks"],
        parameters: pageParams,
        description: `No answer carries a secret. ${view}`,
        responses: { "200": ok("a page of webhooks, by name", ref("WebhookList")), ...errors },
      },
    },
    [`${base}/{name}`]: {
      parameters: [nsParam, nameParam],
      get: {
        operationId: "getWebhook",
        tags: ["webhooks"],
        description: `spec.secret is write-only: never answered. ${view}`,
        responses: { "200": ok("the webhook", ref("Webhook")), ...errors },
      },
      put: {
        operationId: "putWebhook",
        tags: ["webhooks"],
        description: `Creates (201) or replaces (200). spec.url's resolved addresses must pass the webhook egress guard (no loopback, link-local or metadata addresses unless AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW lists them), else 400 naming spec.url; an unknown event or a secret not of the form whsec_<base64 of 24-64 bytes> is 400; nothing is stored. Without spec.secret a create generates one and answers it in spec.secret this once; a replace keeps the stored one. \`If-None-Match: *\` only creates. ${edit}`,
        requestBody: { required: true, content: json(ref("WebhookInput")) },
        responses: {
          "200": ok("the webhook, replaced (no secret)", ref("Webhook")),
          "201": ok("the webhook, created (a generated secret shown once)", ref("Webhook")),
          ...errors,
        },
      },
      delete: {
        operationId: "deleteWebhook",
        tags: ["webhooks"],
        description: `Deleted with the messages still waiting for it and its delivery history. ${edit}`,
        responses: { "200": ok("the deleted webhook", ref("Webhook")), ...errors },
      },
    },
    [`${base}/{name}/deliveries`]: {
      parameters: [nsParam, nameParam],
      get: {
        operationId: "listWebhookDeliveries",
        tags: ["webhooks"],
        description: `Recent delivery attempts, newest first (bounded; kept by the server process that delivered them, since it started). ${view}`,
        responses: { "200": ok("recent attempts", ref("WebhookDeliveryList")), ...errors },
      },
    },
  };
}

/**
 * The OpenAPI 3.1 document of the HTTP API (`GET /openapi.json`), generated from the zod
 * contracts so it cannot drift from what the server parses.
 */
/** A session's declared ports (issue 40): the relay to a port and the port token a preview link takes. */
function portPaths(): Record<string, JsonObject> {
  const portParam = {
    name: "port",
    in: "path",
    required: true,
    schema: { type: "integer", minimum: 1024, maximum: 65535 },
    description: "one of the session's spec.ports",
  };
  const pathParam = {
    name: "path",
    in: "path",
    required: true,
    schema: { type: "string" },
    description: "the session's own path (may hold /), passed with the query",
  };
  const relayed = (method: string) => ({
    operationId: `${method}SessionPort`,
    tags: ["harnesssessions"],
    description:
      "Scope: session:<ns>/<name>:port:<port> (that port only), session:<ns>/<name>:chat or namespace:<ns>:edit. Relayed to a declared port of the session (spec.ports) through its runner: method, path, query, headers (not authorization, nor hop-by-hop ones) and body (at most 4 MiB) passed; the reply streamed back with its status and headers. A WebSocket upgrade of the same URL is relayed too (messages of at most 1 MiB each way). Counts as the session's activity (a Paused session is woken, an idle-stopped one with spec.autoResume resumed first) and is audited. 404 for a port not declared; 503 when nothing listens on it.",
    responses: { default: { description: "the session's own answer" }, ...errors },
  });
  const operations = Object.fromEntries(
    ["get", "post", "put", "patch", "delete"].map((m) => [m, relayed(m)]),
  );
  return {
    "/v1/namespaces/{namespace}/harnesssessions/{name}/ports/{port}/{path}": {
      parameters: [nsParam, nameParam, portParam, pathParam],
      ...operations,
    },
    "/v1/namespaces/{namespace}/harnesssessions/{name}/porttokens": {
      parameters: [nsParam, nameParam],
      post: {
        operationId: "createPortToken",
        tags: ["harnesssessions"],
        description:
          "Scope: session:<ns>/<name>:chat or namespace:<ns>:edit. A token of scope session:<ns>/<name>:port:<port> alone (a preview link's), short-lived (ttl default 15m, at most 24h), answered once with the port's URL. 404 for a port not declared.",
        requestBody: { required: true, content: json(schemaOf(PortTokenRequest, "input")) },
        responses: {
          "201": ok("the token (shown once) and the port's URL", {
            allOf: [
              ref("CreatedToken"),
              { type: "object", properties: { url: { type: "string" } }, required: ["url"] },
            ],
          }),
          ...errors,
        },
      },
    },
  };
}

export function buildOpenApiDocument(): JsonObject {
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: {
      title: "agent-sessions",
      version: API_VERSION,
      description:
        "Persistent, isolated per-agent sessions. Lifecycle RPCs, kubectl-style resources, the request proxy and the event stream. Errors carry gRPC canonical codes.",
    },
    security: [{ bearer: [] }],
    paths: {
      ...operationalPaths(),
      ...rpcPaths(),
      ...resourcePaths(),
      ...workspacePaths(),
      ...snapshotPaths(),
      ...webhookPaths(),
      ...portPaths(),
      ...runnerPaths(),
      ...tokenPaths(),
    },
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description:
            "The admin token ($AGENT_SESSIONS_TOKEN, else <data-dir>/admin-token) or a scoped API token (POST /v1/tokens). Each route needs a scope; a missing one is 403 PERMISSION_DENIED naming it. Runner tokens are refused.",
        },
      },
      responses: {
        Error: { description: "an error with a gRPC canonical code", content: json(ref("Error")) },
      },
      schemas: componentSchemas(),
    },
  };
}
