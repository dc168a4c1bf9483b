import type { MiddlewareHandler } from "hono";

/**
 * What every answer of the API says to a browser that reaches it: never sniff a JSON answer into
 * something it would run (`nosniff`), never keep one (`no-store`: answers carry new tokens,
 * credentials' names, conversation output), and run nothing from it (a CSP of `default-src
 * 'none'`). Pages that set their own (the UI: ui-route.ts) keep theirs: a header already on the
 * answer is left as it is.
 */
export const API_SECURITY_HEADERS = {
  "x-content-type-options": "nosniff",
  "cache-control": "no-store",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
} as const;

/** Adds API_SECURITY_HEADERS to each answer that does not set them itself (error answers included). */
export function securityHeaders(): MiddlewareHandler {
  return async (c, next) => {
    await next();
    const missing = Object.entries(API_SECURITY_HEADERS).filter(([name]) => !c.res.headers.has(name));
    if (missing.length === 0) return;
    try {
      for (const [name, value] of missing) c.res.headers.set(name, value);
    } catch {
      // A Response whose headers are immutable (one passed through as fetched): copy it once.
      const copy = new Response(c.res.body, c.res);
      for (const [name, value] of missing) copy.headers.set(name, value);
      c.res = copy;
    }
  };
}
