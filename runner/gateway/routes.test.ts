import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { GatewayGrant } from "../../contracts/runner-protocol.ts";
import { GatewayRoutes } from "./routes.ts";

const grant: GatewayGrant = { agent: "default/a", upstream: "http://127.0.0.1:11434/v1" };
const dirs: string[] = [];
function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "gateway-routes-"));
  dirs.push(dir);
  return join(dir, "data", "gateway-routes.json");
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("GatewayRoutes", () => {
  it("gives a new route a distinct asgw_ token (32 random bytes) per credential name", () => {
    const routes = new GatewayRoutes();
    const route = routes.ensure("ws-1", grant, { OPENAI_API_KEY: "sk-real", OTHER: "other-real" });
    expect(Object.keys(route.tokens).sort()).toEqual(["OPENAI_API_KEY", "OTHER"]);
    for (const token of Object.values(route.tokens)) {
      expect(token).toMatch(/^asgw_[A-Za-z0-9_-]{43}$/);
      expect(Buffer.from(token.slice(5), "base64url")).toHaveLength(32);
    }
    expect(route.tokens.OPENAI_API_KEY).not.toBe(route.tokens.OTHER);
    expect(routes.ensure("ws-2", grant, { OPENAI_API_KEY: "sk-real" }).tokens.OPENAI_API_KEY).not.toBe(
      route.tokens.OPENAI_API_KEY,
    );
  });

  it("finds a token's route and credential; unknown tokens and look-alikes are not found", () => {
    const routes = new GatewayRoutes();
    const route = routes.ensure("ws-1", grant, { KEY: "sk-real" });
    const token = route.tokens.KEY!;
    expect(routes.find(token)).toEqual({ route, credential: "KEY" });
    expect(routes.find(`${token}x`)).toBeUndefined();
    expect(routes.find(token.slice(0, -1))).toBeUndefined();
    expect(routes.find("sk-real")).toBeUndefined();
  });

  it("a re-provision keeps the tokens, takes the new grant and values, adds and removes names", () => {
    const routes = new GatewayRoutes();
    const first = routes.ensure("ws-1", grant, { KEEP: "v1", GONE: "g" });
    const keep = first.tokens.KEEP!;
    const gone = first.tokens.GONE!;
    const next = routes.ensure("ws-1", { ...grant, models: ["m"] }, { KEEP: "v2", NEW: "n" });
    expect(next.tokens.KEEP).toBe(keep);
    expect(next.tokens.NEW).toMatch(/^asgw_/);
    expect(next.tokens.GONE).toBeUndefined();
    expect(next.grant?.models).toEqual(["m"]);
    expect(routes.find(keep)?.route.credentials.KEEP).toBe("v2");
    expect(routes.find(gone)).toBeUndefined();
    expect(routes.keys()).toEqual(["ws-1"]);
  });

  it("a dropped route's tokens are refused from then on", () => {
    const routes = new GatewayRoutes();
    const token = routes.ensure("run:r1", undefined, { KEY: "v" }).tokens.KEY!;
    routes.drop("run:r1");
    routes.drop("never-there");
    expect(routes.find(token)).toBeUndefined();
    expect(routes.get("run:r1")).toBeUndefined();
    expect(routes.keys()).toEqual([]);
  });

  it("a suspended route's tokens are refused and its values forgotten, on disk too; the next ensure takes the same tokens up again", () => {
    const file = tempFile();
    const routes = new GatewayRoutes({ file });
    const token = routes.ensure("ws-s", grant, { KEY: "sk-stopped" }).tokens.KEY!;
    routes.suspend("ws-s");
    routes.suspend("never-there");
    expect(routes.find(token)).toBeUndefined();
    expect(readFileSync(file, "utf8")).not.toContain("sk-stopped");
    // A restart while stopped: still refused.
    const again = new GatewayRoutes({ file });
    expect(again.find(token)).toBeUndefined();
    // The resume: the workload's environment is the one it had, and the token works again.
    const resumed = again.ensure("ws-s", grant, { KEY: "sk-resumed" });
    expect(resumed.tokens.KEY).toBe(token);
    expect(again.find(token)?.route.credentials).toEqual({ KEY: "sk-resumed" });
  });

  it("keeps its routes in a 0600 file across restarts, a dropped route gone from it too", () => {
    const file = tempFile();
    const routes = new GatewayRoutes({ file });
    const a = routes.ensure("ws-a", grant, { KEY: "sk-a" });
    const b = routes.ensure("ws-b", undefined, { KEY: "sk-b" });
    expect(statSync(file).mode & 0o777).toBe(0o600);
    routes.drop("ws-a");

    const again = new GatewayRoutes({ file });
    expect(again.keys()).toEqual(["ws-b"]);
    expect(again.find(b.tokens.KEY!)?.route).toEqual(b);
    expect(again.find(a.tokens.KEY!)).toBeUndefined();
    expect(again.get("ws-b")?.grant).toBeUndefined();
  });

  it("refuses to start from a file that is not a routes file (never silently empty)", () => {
    const file = tempFile();
    new GatewayRoutes({ file }).ensure("ws", grant, { KEY: "v" });
    writeFileSync(
      file,
      JSON.stringify({ version: 1, routes: [{ key: "ws", tokens: { KEY: "not-a-gateway-token" } }] }),
    );
    expect(() => new GatewayRoutes({ file })).toThrow(/not a gateway routes file/);
    expect(readFileSync(file, "utf8")).toContain("not-a-gateway-token");
  });
});
