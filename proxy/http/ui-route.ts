import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Hono } from "hono";
import { type Logger, silentLogger } from "../observability/log.ts";

export type UiRoutesOptions = {
  /** Where a bundling failure is told. @default silentLogger */
  log?: Logger;
  /** The UI's TypeScript entry (a test points it elsewhere). @default proxy/http/ui/app.ts */
  entry?: string;
};

/** The UI module as the browser gets it: one ES module, every import bundled in. */
export type UiBundle = { text: string; bytes: number; durationMs: number };

const HEADERS = {
  "cache-control": "no-cache",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  // No inline script: the page loads its one module from here.
  "content-security-policy":
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
};

/**
 * Bundles the UI's TypeScript entry (and what it imports: `client/`, type-only `contracts/`, zod)
 * into one browser ES module in memory. The browser platform refuses Node built-ins, so a module
 * that reaches `node:*` fails here rather than in the browser.
 */
export async function bundleUi(entry: string): Promise<UiBundle> {
  // Loaded on first use: a server nobody opens the UI of never starts esbuild's service.
  const { build } = await import("esbuild");
  const started = performance.now();
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    // Evergreen browsers (private class fields, top-level await); Debian's Chromium is far newer.
    target: "es2022",
    minify: true,
    legalComments: "none",
    logLevel: "silent",
  });
  const file = result.outputFiles[0];
  if (!file) throw new Error("esbuild wrote no output");
  return { text: file.text, bytes: file.contents.byteLength, durationMs: performance.now() - started };
}

/** esbuild's messages (`file:line:column: text`), or the error's own text. */
function reasonOf(error: unknown): string {
  const errors = (
    error as { errors?: { text: string; location: { file: string; line: number; column: number } | null }[] }
  ).errors;
  if (!errors?.length) return String(error);
  return errors
    .map((e) =>
      // esbuild names the file relative to its working directory (the process's): made absolute,
      // the log says the same path wherever the server was started from.
      e.location ? `${resolve(e.location.file)}:${e.location.line}:${e.location.column}: ${e.text}` : e.text,
    )
    .join("; ");
}

/**
 * `GET /ui`: the web UI (`GET /` redirects there, so the server's address opens it): a static page
 * and one ES module bundled from `proxy/http/ui/app.ts` on its first request, then kept in memory
 * for the process. The page itself needs no token; everything it shows comes from the public API,
 * through the typed client, with the token the user pastes (kept in sessionStorage).
 */
export function uiRoutes(options: UiRoutesOptions = {}): Hono {
  const log = options.log ?? silentLogger;
  const entry = options.entry ?? fileURLToPath(new URL("./ui/app.ts", import.meta.url));
  let page: string | undefined;
  /** The one bundling under way or done; a failed one is forgotten so the next request tries again. */
  let bundle: Promise<UiBundle> | undefined;

  const html = () => {
    page ??= readFileSync(new URL("./ui/index.html", import.meta.url), "utf8");
    return new Response(page, { headers: { "content-type": "text/html; charset=utf-8", ...HEADERS } });
  };

  const bundled = (): Promise<UiBundle> => {
    bundle ??= bundleUi(entry).then(
      (b) => {
        log("info", "web UI bundled", { entry, bytes: b.bytes, duration_ms: Math.round(b.durationMs) });
        return b;
      },
      (error: unknown) => {
        bundle = undefined;
        log("error", "web UI bundle failed", { entry, error: reasonOf(error) });
        throw error;
      },
    );
    return bundle;
  };

  const module = async (): Promise<Response> => {
    try {
      const { text } = await bundled();
      return new Response(text, {
        headers: { "content-type": "text/javascript; charset=utf-8", ...HEADERS },
      });
    } catch {
      return Response.json(
        {
          code: "INTERNAL",
          message: "the web UI could not be bundled from its TypeScript source; the server log says why",
        },
        { status: 500, headers: HEADERS },
      );
    }
  };

  return new Hono()
    .get("/", (c) => c.redirect("/ui", 302))
    .get("/ui", html)
    .get("/ui/", html)
    .get("/ui/app.js", module)
    .get(
      "/favicon.ico",
      () =>
        new Response(ICON, {
          headers: { ...HEADERS, "content-type": "image/svg+xml", "cache-control": "max-age=86400" },
        }),
    );
}

/** The tab's icon (an SVG served as /favicon.ico, which browsers ask for by themselves): a speech bubble. */
const ICON =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect x="3" y="5" width="26" height="18" rx="5" fill="#2f5bd3"/><path d="M9 22l-2 7 8-6z" fill="#2f5bd3"/><circle cx="11" cy="14" r="2" fill="#fff"/><circle cx="16" cy="14" r="2" fill="#fff"/><circle cx="21" cy="14" r="2" fill="#fff"/></svg>';
