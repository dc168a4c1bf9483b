/**
 * The JSON-RPC messages of MCP the gateway reads on the way (issue 39; MCP specification
 * 2025-06-18, "Tools"): which tool a `tools/call` names, and the two answers it changes or records:
 * a `tools/list` result keeps only the tools a session may call, a `tools/call` result says how the
 * call ended. Pure functions: the forwarder (mcp-forwarder.ts) does the I/O.
 */
import { toolAllowed } from "../../contracts/mcp.ts";

export type ToolLists = { allow?: readonly string[]; deny: readonly string[] };

/** What the gateway needs of a request it forwards. */
export type McpRequest =
  | { kind: "batch" }
  | { kind: "invalid"; message: string }
  | {
      kind: "message";
      id: string | number | undefined;
      method: string | undefined;
      tool: string | undefined;
    };

/** Reads one POST body (a single JSON-RPC message; batches are not part of MCP 2025-06-18). */
export function readMcpRequest(body: Buffer): McpRequest {
  let json: unknown;
  try {
    json = JSON.parse(body.toString("utf8"));
  } catch {
    return { kind: "invalid", message: "the body is not JSON" };
  }
  if (Array.isArray(json)) return { kind: "batch" };
  if (!json || typeof json !== "object")
    return { kind: "invalid", message: "the body is not a JSON-RPC message" };
  const message = json as { id?: unknown; method?: unknown; params?: { name?: unknown } };
  const id = typeof message.id === "string" || typeof message.id === "number" ? message.id : undefined;
  const method = typeof message.method === "string" ? message.method : undefined;
  const tool =
    method === "tools/call" && typeof message.params?.name === "string" ? message.params.name : undefined;
  if (method === "tools/call" && tool === undefined)
    return { kind: "invalid", message: "tools/call without params.name" };
  return { kind: "message", id, method, tool };
}

/** A JSON-RPC error answer (the refusal the agent reads as its tool call's result). */
export function jsonRpcError(id: string | number | undefined | null, code: number, message: string): string {
  return JSON.stringify({ jsonrpc: "2.0", id: id ?? null, error: { code, message } });
}

/** JSON-RPC's "Invalid params": what MCP answers for a tool the server does not offer. */
export const INVALID_PARAMS = -32602;
export const INVALID_REQUEST = -32600;

/** The refusal of a tool the session may not call, before anything reaches the server. */
export function toolRefusal(server: string, tool: string): string {
  return `tool "${tool}" is not allowed for this session on MCP server "${server}": the gateway refused the call, which never reached the server`;
}

export type AnswerReading = {
  /** The message to send on in its place (a `tools/list` result filtered); undefined: unchanged. */
  rewritten?: string;
  /** How a `tools/call` ended, when this message is its answer. */
  outcome?: { outcome: "ok" | "error"; message?: string };
};

/**
 * Reads one JSON-RPC message of the server's answer to the request `id` of `method`: a
 * `tools/list` result loses the tools not allowed; a `tools/call` answer gives its outcome. Any
 * other message (a notification, another id, not JSON) passes unchanged.
 */
export function readAnswer(
  text: string,
  request: { id: string | number; method: string },
  tools: ToolLists,
): AnswerReading {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return {};
  }
  if (!json || typeof json !== "object" || Array.isArray(json)) return {};
  const message = json as {
    id?: unknown;
    result?: { tools?: unknown; isError?: unknown; content?: unknown };
    error?: { message?: unknown };
  };
  if (message.id !== request.id) return {};
  if (request.method === "tools/list") {
    const listed = message.result?.tools;
    if (!Array.isArray(listed)) return {};
    const kept = listed.filter(
      (tool) =>
        tool && typeof tool === "object" && typeof tool.name === "string" && toolAllowed(tools, tool.name),
    );
    return { rewritten: JSON.stringify({ ...message, result: { ...message.result, tools: kept } }) };
  }
  if (request.method === "tools/call") {
    if (message.error)
      return {
        outcome: {
          outcome: "error",
          message: typeof message.error.message === "string" ? message.error.message.slice(0, 512) : "error",
        },
      };
    return { outcome: { outcome: message.result?.isError === true ? "error" : "ok" } };
  }
  return {};
}

/**
 * Splits a `text/event-stream` into its events (separated by a blank line), so each `data:` of an
 * event can be read whole. Holds at most `maxEventBytes` of an unfinished event.
 */
export class SseEvents {
  #pending = "";
  readonly #max: number;

  constructor(maxEventBytes: number) {
    this.#max = maxEventBytes;
  }

  /** The complete events in `piece` (each with its terminating blank line); throws past the bound. */
  push(piece: string): string[] {
    this.#pending += piece;
    const out: string[] = [];
    for (;;) {
      const match = /\r?\n\r?\n/.exec(this.#pending);
      if (!match) break;
      const end = match.index + match[0].length;
      out.push(this.#pending.slice(0, end));
      this.#pending = this.#pending.slice(end);
    }
    if (this.#pending.length > this.#max) throw new Error("an event of the MCP server's stream is too large");
    return out;
  }

  /** What is left when the stream ends. */
  end(): string {
    const rest = this.#pending;
    this.#pending = "";
    return rest;
  }
}

/** An event's data (its `data:` lines joined), and the event rebuilt with new data. */
export function eventData(event: string): string | undefined {
  const lines = event.split(/\r?\n/).filter((line) => line.startsWith("data:"));
  if (lines.length === 0) return undefined;
  return lines.map((line) => line.slice(5).replace(/^ /, "")).join("\n");
}

export function withEventData(event: string, data: string): string {
  const kept = event.split(/\r?\n/).filter((line) => line !== "" && !line.startsWith("data:"));
  return `${[...kept, ...data.split("\n").map((line) => `data: ${line}`)].join("\n")}\n\n`;
}
