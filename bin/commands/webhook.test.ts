import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { until } from "../../test/support/until.ts";
import { type CliResult, runCli } from "../testing-cli.ts";

let t: TestServer;
let receiver: Server;
let url = "";

function cli(args: string[]): Promise<CliResult> {
  return runCli(t.server.url, ADMIN_TOKEN, args);
}

beforeAll(async () => {
  t = await startTestServer({
    webhooks: { egressAllow: ["127.0.0.1/32"], attemptsMax: 2, retryBaseMs: 10, timeoutMs: 2_000 },
  });
  receiver = createServer((_req, res) => res.writeHead(204).end());
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});
afterAll(async () => {
  await t.close();
  receiver.close();
});

describe("agent-sessions apply / get webhooks / webhook deliveries", () => {
  it("apply prints a generated secret once; get never shows it; deliveries lists the attempts", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webhook-cli-"));
    const file = join(dir, "hook.yaml");
    writeFileSync(
      file,
      `apiVersion: agent-sessions.dev/v1alpha1\nkind: Webhook\nmetadata:\n  name: portal\nspec:\n  url: ${url}\n  events: [created]\n`,
    );
    const applied = await cli(["apply", "-f", file]);
    expect(applied.code, applied.stderr).toBe(0);
    const lines = applied.stdout.trim().split("\n");
    expect(lines[0]).toBe("webhook/portal created");
    expect(lines[1]).toMatch(/^whsec_/);
    const again = await cli(["apply", "-f", file]);
    expect(again.stdout.trim()).toBe("webhook/portal configured");
    const got = await cli(["get", "webhooks"]);
    expect(got.code, got.stderr).toBe(0);
    expect(got.stdout).toMatch(/NAME\s+URL\s+EVENTS/);
    expect(got.stdout).toContain("portal");
    const yaml = await cli(["get", "wh", "portal", "-o", "yaml"]);
    expect(yaml.stdout).not.toContain("whsec_");
    await t.runner();
    const put = await t.call("PUT", "/v1/namespaces/default/harnesssessions/s", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "s" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    expect(put.status).toBe(201);
    const shown = await until("a delivery", async () => {
      const r = await cli(["webhook", "deliveries", "portal"]);
      return r.stdout.includes("succeeded") ? r : undefined;
    });
    expect(shown.stdout).toMatch(/ID\s+TYPE\s+SESSION\s+ATTEMPT\s+OUTCOME\s+STATUS/);
    expect(shown.stdout).toMatch(/msg_\w+\s+created\s+s\s+1\s+succeeded\s+204/);
    const missing = await cli(["webhook", "deliveries", "nope"]);
    expect(missing.code).toBe(3);
  });
});
