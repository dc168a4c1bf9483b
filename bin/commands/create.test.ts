import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { type CliResult, runCli } from "../testing-cli.ts";

let t: TestServer;

/** The CLI as a user runs it, against a real server on port 0. */
function cli(args: string[]): Promise<CliResult> {
  return runCli(t.server.url, ADMIN_TOKEN, args);
}

beforeAll(async () => {
  t = await startTestServer({}, { agent: false });
});
afterAll(async () => {
  await t.close();
});

const agent = (model: string) =>
  `apiVersion: agent-sessions.dev/v1alpha1\nkind: Agent\nmetadata: {name: dora}\nspec:\n  runtimeRef: reference\n  model: {baseUrl: "http://10.0.0.1/v1", name: ${model}}\n`;

// Each step starts the CLI (a Node process, ~1 s on a loaded machine): a budget, not a timing.
describe("agent-sessions create", { timeout: 60_000 }, () => {
  it("creates a new name and refuses an existing one (ALREADY_EXISTS, exit 4), keeping what is stored", async () => {
    const dir = mkdtempSync(join(tmpdir(), "create-test-"));
    const first = join(dir, "first.yaml");
    const second = join(dir, "second.yaml");
    writeFileSync(first, agent("first"));
    writeFileSync(second, agent("second"));
    const created = await cli(["create", "-f", first]);
    expect(created.stderr).toBe("");
    expect(created.code).toBe(0);
    expect(created.stdout).toContain("agent/dora created");
    const again = await cli(["create", "-f", second]);
    expect(again.code).toBe(4);
    expect(again.stderr).toContain("ALREADY_EXISTS");
    const stored = await t.call("GET", "/v1/namespaces/default/agents/dora");
    expect(stored.body.spec.model.name).toBe("first");
  });
});
