import { z } from "zod";
import { ADAPTER_PORT } from "./adapter.ts";
import { parseDuration } from "./duration.ts";
import { DnsLabel } from "./session-spec.ts";

/**
 * A HarnessSession's declared ports (issue 40, "preview ports"): a process in the session that
 * listens on one of them is reached through the proxy only, at
 * `/v1/namespaces/{ns}/harnesssessions/{name}/ports/{port}/…` (HTTP and WebSocket), relayed
 * server → runner → session like requests are, with a token that opens it (the port scope,
 * contracts/access.ts). Nothing else of the session is reachable that way: never the adapter's
 * port, never a port not declared here (the runner and, on Kubernetes, the session's
 * NetworkPolicy both refuse it).
 */

/** Ports a session may declare at most. */
export const SESSION_PORTS_MAX = 8;

/**
 * Ports a session may never declare: the adapter's own (its request API answers the runner only,
 * with the session's adapter token). A runtime's `spec.session.port` is refused likewise when
 * the session is admitted (proxy/harness/harness-sessions.ts).
 */
export const RESERVED_SESSION_PORTS: readonly number[] = [ADAPTER_PORT];

const RANGE = "must be an integer from 1024 to 65535";

/** A port number a session's process may listen on: unprivileged (the workload runs as non-root). */
export const PortNumber = z
  .number({ error: RANGE })
  .int({ error: RANGE })
  .min(1024, { error: RANGE })
  .max(65535, { error: RANGE });

export const SessionPort = z.strictObject({
  port: PortNumber.refine((p) => !RESERVED_SESSION_PORTS.includes(p), {
    error: `must not be the adapter's own port ${ADAPTER_PORT}`,
  }),
  /** A DNS label: it names the port in the Kubernetes Service and in links. */
  name: DnsLabel.max(15, { error: "must be at most 15 characters (a Kubernetes port name)" }).refine(
    (n) => n !== "adapter",
    { error: "must not be adapter (the adapter's port is named so)" },
  ),
});
export type SessionPort = z.infer<typeof SessionPort>;

/** `spec.ports`: at most SESSION_PORTS_MAX, no port or name twice. */
export const SessionPorts = z
  .array(SessionPort)
  .max(SESSION_PORTS_MAX, { error: `at most ${SESSION_PORTS_MAX} ports` })
  .superRefine((ports, ctx) => {
    const seenPorts = new Set<number>();
    const seenNames = new Set<string>();
    ports.forEach((p, i) => {
      if (seenPorts.has(p.port))
        ctx.addIssue({ code: "custom", path: [i, "port"], message: `port ${p.port} is declared twice` });
      if (seenNames.has(p.name))
        ctx.addIssue({ code: "custom", path: [i, "name"], message: `name ${p.name} is declared twice` });
      seenPorts.add(p.port);
      seenNames.add(p.name);
    });
  });
export type SessionPorts = z.infer<typeof SessionPorts>;

/** The path of a session's port under the API (no trailing slash: add the session's own path). */
export function portPath(namespace: string, name: string, port: number): string {
  return `/v1/namespaces/${encodeURIComponent(namespace)}/harnesssessions/${encodeURIComponent(name)}/ports/${port}`;
}

export const PORT_TOKEN_TTL_DEFAULT = "15m";
export const PORT_TOKEN_TTL_MAX_MS = 24 * 3_600_000;

/**
 * `POST …/harnesssessions/{name}/porttokens` (what the UI calls for a preview link): a token of
 * the port's scope alone, short-lived. Minted with the session's chat, the namespace's edit or
 * admin: tokens that open the session's ports already.
 */
export const PortTokenRequest = z.strictObject({
  port: PortNumber,
  /** @default 15m; at most 24h */
  ttl: z
    .string()
    .refine(
      (text) => {
        const ms = parseDuration(text);
        return ms !== undefined && ms > 0 && ms <= PORT_TOKEN_TTL_MAX_MS;
      },
      { error: "must be a duration such as 5m or 1h, more than 0 and up to 24h" },
    )
    .default(PORT_TOKEN_TTL_DEFAULT),
});
export type PortTokenRequest = z.infer<typeof PortTokenRequest>;

/** The route's pattern: namespace, session, port, then the session's own path (may be empty). */
export const PORT_ROUTE = /^\/v1\/namespaces\/([^/]+)\/harnesssessions\/([^/]+)\/ports\/([^/]+)(\/.*)?$/;

/**
 * Largest request body relayed to a port: it goes to the runner in one command (base64 in the
 * link's JSON, whose messages are at most 8 MiB).
 */
export const PORT_REQUEST_BODY_MAX_BYTES = 4 * 1024 * 1024;

/** One WebSocket message relayed either way at most. */
export const PORT_SOCKET_MESSAGE_MAX_BYTES = 1024 * 1024;

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the relay sets itself: never passed through
 * either way. `authorization` and `cookie` are the proxy's (the caller's token): never passed
 * to the session.
 */
const DROPPED = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "content-length",
  "authorization",
  "sec-websocket-key",
  "sec-websocket-version",
  "sec-websocket-extensions",
  "sec-websocket-accept",
]);

/** Headers as pairs, lower-case names, the relay's own and hop-by-hop ones dropped. */
export const PortHeaders = z.array(z.tuple([z.string().max(256), z.string().max(8192)])).max(128);
export type PortHeaders = z.infer<typeof PortHeaders>;

/** The headers of `from` that pass through a port relay (either way). */
export function passedHeaders(from: Iterable<[string, string]>): PortHeaders {
  const out: PortHeaders = [];
  for (const [key, value] of from) {
    const k = key.toLowerCase();
    if (DROPPED.has(k)) continue;
    out.push([k, value]);
    if (out.length >= 128) break;
  }
  return out;
}
