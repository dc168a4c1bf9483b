import { Hono } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import { randomBytes } from "node:crypto";
import { scopeOf } from "../../contracts/access.ts";
import {
  PORT_REQUEST_BODY_MAX_BYTES,
  PORT_ROUTE,
  PortTokenRequest,
  passedHeaders,
  portPath,
} from "../../contracts/session-ports.ts";
import { DnsLabel } from "../../contracts/session-spec.ts";
import { parseInput, readJson } from "../lifecycle/request-body.ts";
import type { ApiTokens } from "./api-tokens.ts";
import type { Audit } from "../observability/audit.ts";
import { PortRelay } from "../relay/port-relay.ts";
import { acceptPortSocket, upgradeOf } from "./port-socket.ts";

/** A session port's route (issue 40): its body is the session's business, bounded by the relay. */
export const PORT_PATH = PORT_ROUTE;

/**
 * Under `/v1/namespaces`: `/{ns}/harnesssessions/{name}/ports/{port}/…`, any method, relayed to
 * that declared port of the session (relay/port-relay.ts) with the rest of the path and the
 * query; the caller's `authorization` never passes. Audited once the reply ended, like
 * `…/requests`. A WebSocket upgrade of the same path is the server's `upgrade` handler's
 * (port-socket.ts), never this route's. `POST …/harnesssessions/{name}/porttokens` `{port, ttl?}`
 * mints a short-lived token of that port's scope alone (a preview link's), answered with its URL.
 */
export function portRoutes(relay: PortRelay, audit: Audit, tokens: ApiTokens): Hono {
  const ns = (raw: string) => parseInput(DnsLabel, raw, "namespace", { in: "path", name: "namespace" });
  const name = (raw: string) => parseInput(DnsLabel, raw, "name", { in: "path", name: "name" });
  const handler = async (c: import("hono").Context) => {
    const started = performance.now();
    const match = PORT_ROUTE.exec(c.req.path);
    const namespace = ns(c.req.param("ns") ?? "");
    const session = name(c.req.param("name") ?? "");
    const { record, port } = await relay.declared(namespace, session, c.req.param("port") ?? "");
    const body = upgradeOf(c) ? Buffer.alloc(0) : await PortRelay.readBody(c.req.raw);
    if (body === "too-large")
      return c.json(
        {
          code: "RESOURCE_EXHAUSTED",
          message: `the request body exceeds ${PORT_REQUEST_BODY_MAX_BYTES} bytes`,
          details: { limit_bytes: PORT_REQUEST_BODY_MAX_BYTES },
        },
        413,
      );
    const url = new URL(c.req.url);
    const path = `${match?.[4] ?? "/"}${url.search}`;
    const principal = c.get("principal");
    const upgrade = upgradeOf(c);
    const admitted = await relay.admit(
      record,
      port,
      upgrade ? new AbortController().signal : c.req.raw.signal,
      principal,
    );
    const done = (outcome: "succeeded" | "failed" | "cancelled" | "rejected", code?: CodedError["code"]) =>
      audit({
        http_request_id: c.get("requestId"),
        request_id: admitted.requestId,
        namespace,
        session,
        outcome,
        ...(code ? { code } : {}),
        usage: undefined,
        stream: true,
        duration_ms: performance.now() - started,
        token_id: principal.id,
        token_name: principal.name,
      });
    if (upgrade) {
      try {
        const { ended } = await acceptPortSocket(relay, admitted, port, path, upgrade);
        void ended.then((outcome) => done(outcome));
      } catch (error) {
        await admitted.finish("failed");
        done("failed", error instanceof CodedError ? error.code : "INTERNAL");
        throw error;
      }
      // Not written: the handshake was taken over (port-socket.ts).
      return c.body(null, 204);
    }
    try {
      const { response, settled } = await relay.http(admitted, port, {
        method: c.req.method,
        path,
        headers: passedHeaders(c.req.raw.headers.entries()),
        body: body.length > 0 ? body : undefined,
        signal: c.req.raw.signal,
      });
      void settled.then((outcome) => done(outcome));
      return response;
    } catch (error) {
      done("failed", error instanceof CodedError ? error.code : "INTERNAL");
      throw error;
    }
  };
  return new Hono()
    .post("/:ns/harnesssessions/:name/porttokens", async (c) => {
      const namespace = ns(c.req.param("ns"));
      const session = name(c.req.param("name"));
      const request = parseInput(PortTokenRequest, await readJson(c), "port token request");
      await relay.declared(namespace, session, String(request.port));
      const created = await tokens.create({
        name: `port-${request.port}-${randomBytes(6).toString("hex")}`,
        scopes: [scopeOf.port(namespace, session, request.port)],
        ttl: request.ttl,
      });
      const url = new URL(c.req.url);
      return c.json({ ...created, url: `${url.origin}${portPath(namespace, session, request.port)}/` }, 201);
    })
    .all("/:ns/harnesssessions/:name/ports/:port", handler)
    .all("/:ns/harnesssessions/:name/ports/:port/*", handler);
}
