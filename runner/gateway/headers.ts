/**
 * Which headers cross the model gateway, and the one change it makes to them: every gateway token
 * of the call's route, in the headers a credential travels in, becomes the real value.
 */
import type { IncomingHttpHeaders } from "node:http";
import type { GatewayRoute } from "./routes.ts";

/** The headers a token is found in (and swapped in): OpenAI, Anthropic, Azure OpenAI. */
const CREDENTIAL_HEADERS: readonly string[] = ["authorization", "x-api-key", "api-key"];
/**
 * Hop-by-hop headers (RFC 9110 §7.6.1, and RFC 2616 §13.5.1's list) are the connection's own,
 * never forwarded; `host` is the upstream's, `content-length` undici's (the body may be rewritten).
 * `expect`: node answers `100-continue` itself and undici refuses the header.
 */
const NOT_FORWARDED = new Set([
  "connection",
  "proxy-connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "content-length",
  "expect",
]);

/**
 * The tokens a call presents, in the order they are tried: the bearer, `x-api-key`, `api-key`
 * (a harness may send a key of its own in one header and the session's credential in another).
 */
export function presentedTokens(headers: IncomingHttpHeaders): string[] {
  const tokens: string[] = [];
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(headers.authorization ?? "")?.[1];
  if (bearer) tokens.push(bearer);
  for (const name of ["x-api-key", "api-key"]) {
    const value = headers[name];
    if (typeof value === "string" && value.trim() !== "") tokens.push(value.trim());
  }
  return tokens;
}

/** The client's headers for the provider: the connection's own left out, every token of the route swapped for its value. */
export function upstreamHeaders(
  headers: IncomingHttpHeaders,
  route: GatewayRoute,
): Record<string, string | string[]> {
  const listed = new Set(
    String(headers.connection ?? "")
      .toLowerCase()
      .split(",")
      .map((name) => name.trim()),
  );
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || NOT_FORWARDED.has(name) || listed.has(name)) continue;
    out[name] = CREDENTIAL_HEADERS.includes(name) ? withValues(value, route) : value;
  }
  // The reply is read for its usage on the way: it must come uncompressed.
  out["accept-encoding"] = "identity";
  return out;
}

function withValues(value: string | string[], route: GatewayRoute): string | string[] {
  if (Array.isArray(value)) return value.map((v) => withValues(v, route) as string);
  let out = value;
  for (const [credential, token] of Object.entries(route.tokens))
    out = out.replaceAll(token, route.credentials[credential] ?? "");
  return out;
}

/** The provider's headers for the client: the connection's own left out (`content-length` kept). */
export function clientHeaders(
  headers: Record<string, string | string[] | undefined>,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || (NOT_FORWARDED.has(name) && name !== "content-length")) continue;
    out[name] = value;
  }
  return out;
}
