import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Script } from "node:vm";
import { afterAll, describe, expect, it } from "vitest";
import type { Logger } from "../observability/log.ts";
import { uiRoutes } from "./ui-route.ts";

type Line = { level: string; msg: string; fields: Record<string, unknown> | undefined };
const recorder = () => {
  const lines: Line[] = [];
  const log: Logger = (level, msg, fields) => lines.push({ level, msg, fields });
  return { lines, log };
};

describe("GET /ui", () => {
  const { lines, log } = recorder();
  const app = uiRoutes({ log });

  it("serves the page, which loads its one module", async () => {
    for (const path of ["/ui", "/ui/"]) {
      const res = await app.request(path);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(res.headers.get("content-security-policy")).toContain("default-src 'self'");
      const html = await res.text();
      expect(html).toContain('<script type="module" src="/ui/app.js"></script>');
      // The CSP allows no inline script: the module is the only one.
      expect(html.match(/<script/g)).toHaveLength(1);
    }
  });

  it("serves the module as one JavaScript bundle of the TypeScript UI and the typed client", async () => {
    const res = await app.request("/ui/app.js");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(res.headers.get("content-security-policy")).toBe(
      "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    );
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    const js = await res.text();
    // Parses as a classic script: valid JavaScript (no TypeScript left) with no import or export
    // statement, so nothing the browser would have to fetch besides this file.
    expect(() => new Script(js, { filename: "app.js" })).not.toThrow();
    expect(js).not.toMatch(/\bimport\s*\(/);
    // The UI's own code and the client's (its UNAVAILABLE message), bundled in.
    expect(js).toContain("agent-sessions.token");
    expect(js).toContain("cannot reach ");
    expect(js).toContain("sessionStorage");
    expect(js).not.toContain("localStorage");
    expect(js).not.toContain("EventSource(");
    expect(js).not.toMatch(/\bprocess\.|\bBuffer\b|node:/);
    // No zod: the client's error codes are plain values (contracts/error-codes.ts); zod would
    // make the page's one script ~27 times larger.
    expect(js).not.toContain("Zod");
  });

  it("bundles once for the process, however many ask at once", async () => {
    const answers = await Promise.all([1, 2, 3].map(() => app.request("/ui/app.js")));
    const texts = await Promise.all(answers.map((r) => r.text()));
    expect(new Set(texts).size).toBe(1);
    const bundled = lines.filter((l) => l.msg === "web UI bundled");
    expect(bundled).toHaveLength(1);
    expect(bundled[0]?.fields).toMatchObject({ bytes: Buffer.byteLength(texts[0] ?? "") });
  });

  it("has nothing else", async () => {
    expect((await app.request("/ui/../main.ts")).status).toBe(404);
    expect((await app.request("/ui/ui-route.ts")).status).toBe(404);
    expect((await app.request("/ui/app.ts")).status).toBe(404);
  });
});

describe("GET /ui/app.js when the UI cannot be bundled", () => {
  const dir = mkdtempSync(join(tmpdir(), "as-ui-bundle-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("answers 500 saying so, logs why, and tries again on the next request", async () => {
    const entry = join(dir, "app.ts");
    // A browser has no node:crypto: the browser platform refuses it.
    writeFileSync(entry, 'import { createHash } from "node:crypto";\nconsole.log(createHash("sha256"));\n');
    const { lines, log } = recorder();
    const app = uiRoutes({ log, entry });
    const res = await app.request("/ui/app.js");
    expect(res.status).toBe(500);
    expect(res.headers.get("content-type")).toContain("application/json");
    expect(await res.json()).toEqual({
      code: "INTERNAL",
      message: "the web UI could not be bundled from its TypeScript source; the server log says why",
    });
    const failed = lines.filter((l) => l.msg === "web UI bundle failed");
    expect(failed).toHaveLength(1);
    expect(failed[0]?.level).toBe("error");
    expect(String(failed[0]?.fields?.error)).toContain("node:crypto");
    expect(String(failed[0]?.fields?.error)).toContain(`${entry}:1:`);

    writeFileSync(entry, 'const name: string = "fixed";\nconsole.log(name);\n');
    const again = await app.request("/ui/app.js");
    expect(again.status).toBe(200);
    expect(await again.text()).toContain("fixed");
  });
});
