import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { type CliResult, runCli } from "../testing-cli.ts";

let t: TestServer;

/** The CLI as a user runs it, against a real server on port 0. */
function cli(args: string[], token = ADMIN_TOKEN): Promise<CliResult> {
  return runCli(t.server.url, token, args);
}

beforeAll(async () => {
  t = await startTestServer({}, { agent: false });
});
afterAll(async () => {
  await t.close();
});

// Each step starts the CLI (a Node process, ~1 s on a loaded machine): a budget, not a timing.
describe("agent-sessions token", { timeout: 60_000 }, () => {
  it("creates (the token alone on the last stdout line), lists without the secret and revokes", async () => {
    const created = await cli([
      "token",
      "create",
      "--name",
      "ci",
      "--scope",
      "namespace:default:view",
      "--ttl",
      "2h",
    ]);
    expect(created.code).toBe(0);
    const token = created.stdout.trimEnd().split("\n").at(-1) ?? "";
    expect(token).toMatch(/^ast_[A-Za-z0-9_-]{43}$/);

    const listed = await cli(["token", "list"]);
    expect(listed.stdout).toContain("ci");
    expect(listed.stdout).toContain("namespace:default:view");
    expect(listed.stdout).not.toContain(token);

    // The new token works for what its scope allows, and the CLI names the missing scope otherwise.
    expect((await cli(["get", "agents"], token)).code).toBe(0);
    const denied = await cli(["token", "list"], token);
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toContain("PERMISSION_DENIED");
    expect(denied.stderr).toContain("it needs scope admin");

    expect((await cli(["token", "revoke", "ci"])).code).toBe(0);
    const revoked = await cli(["get", "agents"], token);
    expect(revoked.stderr).toContain("UNAUTHENTICATED");
  });

  it("refuses a malformed scope as a usage error, creating nothing", async () => {
    const bad = await cli(["token", "create", "--name", "bad", "--scope", "namespace:default:root"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--scope");
    expect((await cli(["token", "list", "-o", "json"])).stdout).not.toContain('"bad"');
  });
});
