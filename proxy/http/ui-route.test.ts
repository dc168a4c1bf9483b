import { describe, expect, it } from "vitest";
import { uiRoutes } from "./ui-route.ts";

describe("GET /ui", () => {
  const app = uiRoutes();

  it("serves the page, which loads its one module", async () => {
    for (const path of ["/ui", "/ui/"]) {
      const res = await app.request(path);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(res.headers.get("content-security-policy")).toContain("default-src 'self'");
      expect(await res.text()).toContain('<script type="module" src="/ui/app.js"></script>');
    }
  });

  it("serves the module as JavaScript; it keeps the token in sessionStorage only", async () => {
    const res = await app.request("/ui/app.js");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    const js = await res.text();
    expect(js).toContain("sessionStorage");
    expect(js).not.toContain("localStorage");
    expect(js).not.toContain("EventSource(");
  });

  it("has nothing else", async () => {
    expect((await app.request("/ui/../main.ts")).status).toBe(404);
    expect((await app.request("/ui/ui-route.ts")).status).toBe(404);
  });
});
