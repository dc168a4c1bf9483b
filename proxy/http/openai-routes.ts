import { Hono, type MiddlewareHandler } from "hono";
import type { ModelList } from "../../contracts/openai-chat.ts";
import { DnsLabel } from "../../contracts/session-spec.ts";
import type { HarnessSessions } from "../harness/harness-sessions.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import { openAIChatFormat } from "../relay/openai-chat-format.ts";
import { isApiError, openAIError } from "../relay/openai-error.ts";
import type { RequestRelay } from "../relay/request-relay.ts";

/** Every route of a session's OpenAI-compatible API (issue 41), as a pattern of `c.req.path`. */
export const OPENAI_PATH = /^\/v1\/namespaces\/[^/]+\/harnesssessions\/[^/]+\/openai\//;
/** The chat completions route: its body is the session's business, limited by the relay. */
export const OPENAI_CHAT_PATH =
  /^\/v1\/namespaces\/[^/]+\/harnesssessions\/[^/]+\/openai\/v1\/chat\/completions$/;

/**
 * Under `/v1/namespaces`: `/{ns}/harnesssessions/{name}/openai/v1/chat/completions` (POST, the
 * request relay in OpenAI's shape: relay/openai-chat-format.ts) and `…/openai/v1/models` (GET,
 * the one model the session answers as: its name). Same tokens, scopes, accounting, audit,
 * auto-resume and limits as `…/requests`.
 */
export function openAIRoutes(options: { sessions: HarnessSessions; relay: RequestRelay }): Hono {
  const { sessions, relay } = options;
  const ns = (raw: string) => parseInput(DnsLabel, raw, "namespace", { in: "path", name: "namespace" });
  const name = (raw: string) => parseInput(DnsLabel, raw, "name", { in: "path", name: "name" });
  return new Hono()
    .post("/:ns/harnesssessions/:name/openai/v1/chat/completions", (c) => {
      const session = name(c.req.param("name"));
      return relay.relay(c, ns(c.req.param("ns")), session, openAIChatFormat(session));
    })
    .get("/:ns/harnesssessions/:name/openai/v1/models", async (c) => {
      const session = await sessions.get(ns(c.req.param("ns")), name(c.req.param("name")));
      const created = Date.parse(session.metadata.creationTimestamp);
      return c.json({
        object: "list",
        data: [
          {
            id: session.metadata.name,
            object: "model",
            created: Number.isNaN(created) ? 0 : Math.floor(created / 1000),
            owned_by: "agent-sessions",
          },
        ],
      } satisfies ModelList);
    });
}

/**
 * Every JSON error answered under `…/openai/` (authentication, scopes, limits, the relay's and
 * the handlers' errors, unknown routes) in OpenAI's shape (relay/openai-error.ts), its status
 * kept. Mount it before authentication so it sees every answer on its way out.
 */
export function openAIErrors(): MiddlewareHandler {
  return async (c, next) => {
    await next();
    if (!OPENAI_PATH.test(c.req.path)) return;
    const response = c.res;
    if (response.status < 400 || !response.headers.get("content-type")?.startsWith("application/json"))
      return;
    const body: unknown = await response
      .clone()
      .json()
      .catch(() => undefined);
    if (!isApiError(body)) return;
    // Hono carries the old answer's headers over (x-request-id, security headers) but its length.
    response.headers.delete("content-length");
    c.res = new Response(JSON.stringify(openAIError(response.status, body)), {
      status: response.status,
      headers: { "content-type": "application/json" },
    });
  };
}
