import { readFileSync } from "node:fs";
import { Hono } from "hono";

const files = {
  "index.html": "text/html; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
} as const;

/**
 * `GET /ui`: the web UI (`GET /` redirects there, so the server's address opens it), a static page and one vanilla JS module from `proxy/ui/` (no build
 * step). The page itself needs no token; everything it shows comes from the public API with the
 * admin token the user pastes (kept in sessionStorage).
 */
export function uiRoutes(): Hono {
  const read = (name: keyof typeof files) => readFileSync(new URL(`./ui/${name}`, import.meta.url), "utf8");
  const cache = new Map<string, string>();
  const serve = (name: keyof typeof files) => {
    let text = cache.get(name);
    if (text === undefined) {
      text = read(name);
      cache.set(name, text);
    }
    return new Response(text, {
      headers: {
        "content-type": files[name],
        "cache-control": "no-cache",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "content-security-policy":
          "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
      },
    });
  };
  return new Hono()
    .get("/", (c) => c.redirect("/ui", 302))
    .get("/ui", () => serve("index.html"))
    .get("/ui/", () => serve("index.html"))
    .get("/ui/app.js", () => serve("app.js"));
}
