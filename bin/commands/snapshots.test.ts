import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultHandler, type FakeRunner } from "../../proxy/testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { until } from "../../test/support/until.ts";
import { type CliResult, runCli } from "../testing-cli.ts";

let t: TestServer;
let runner: FakeRunner;

/** The CLI as a user runs it, against a real server on port 0 with a fake runner. */
function cli(args: string[]): Promise<CliResult> {
  return runCli(t.server.url, ADMIN_TOKEN, args);
}

/** A ustar header + body of one small file, then the end blocks: what a runner's `snapshot_read` sends. */
function tinyTar(name: string, body: string): Buffer {
  const header = Buffer.alloc(512);
  header.write(name, 0);
  header.write("0000644\0", 100);
  header.write("0000000\0", 108);
  header.write("0000000\0", 116);
  header.write(`${body.length.toString(8).padStart(11, "0")}\0`, 124);
  header.write("00000000000\0", 136);
  header.fill(0x20, 148, 156);
  header.write("0", 156);
  header.write("ustar\0", 257);
  header.write("00", 263);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148);
  const data = Buffer.alloc(512);
  data.write(body);
  return Buffer.concat([header, data, Buffer.alloc(1024)]);
}

beforeAll(async () => {
  t = await startTestServer();
  runner = await t.runner({
    name: "runner-a",
    handler: (command) => {
      switch (command.kind) {
        case "snapshot_take":
          return { ok: true, result: { size_bytes: 77 } };
        case "snapshot_read":
          for (const [data, done] of [
            [tinyTar("volume/a.txt", "hi").toString("base64"), false],
            ["", true],
          ] as const)
            runner.send({
              version: 1,
              type: "relay_chunk",
              payload: { relay_id: command.relay_id, data, done },
            });
          return { ok: true, result: { size: 2048 } };
        case "snapshot_write":
          return { ok: true, result: { size: 0, ...(command.done ? { size_bytes: 2 } : {}) } };
        case "provision":
          return {
            ok: true,
            result: {
              container_name: command.container_name,
              endpoint: "10.0.0.9:8080",
              ...(command.spec.seedSnapshot ? { seeded_snapshot: command.spec.seedSnapshot.storage } : {}),
            },
          };
        default:
          return defaultHandler(command);
      }
    },
  });
  await t.put("/v1/namespaces/default/harnesssessions/chat", {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice" },
  });
  await until("chat Ready", async () =>
    (await t.call("GET", "/v1/namespaces/default/harnesssessions/chat")).body.status?.phase === "Ready"
      ? true
      : undefined,
  );
});
afterAll(async () => {
  await t.close();
});

// Each step starts the CLI (a Node process, ~1 s on a loaded machine): a budget, not a timing.
describe("agent-sessions snapshot, snapshots, fork, restore, export, import, delete snapshot", {
  timeout: 120_000,
}, () => {
  it("takes, lists, forks, restores, exports, imports and deletes as a user would", async () => {
    const taken = await cli(["snapshot", "chat", "s1"]);
    expect(taken.stderr).toBe("");
    expect(taken.stdout).toContain("sessionsnapshot/s1 taken of harnesssession/chat (77B)");

    const listed = await cli(["snapshots"]);
    expect(listed.stdout).toMatch(/NAME\s+SESSION\s+AGENT\s+RUNTIME\s+PHASE\s+SIZE\s+ENGINE\s+RUNNER\s+AGE/);
    expect(listed.stdout).toMatch(/s1\s+chat\s+alice\s+reference\s+Ready\s+77B\s+\S+\s+runner-a/);

    const forked = await cli(["fork", "s1", "chat-2"]);
    expect(forked.stdout, forked.stderr).toContain(
      "harnesssession/chat-2 forked from sessionsnapshot/s1 (phase Ready)",
    );
    expect(runner.commandsOf("provision").at(-1)?.spec.seedSnapshot?.name).toBe("s1");

    const restored = await cli(["restore", "chat", "s1"]);
    expect(restored.stdout, restored.stderr).toContain("harnesssession/chat restored to sessionsnapshot/s1");

    const dir = mkdtempSync(join(tmpdir(), "snapshot-cli-"));
    const file = join(dir, "s1.tar.gz");
    const exported = await cli(["export", "s1", file]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const tar = gunzipSync(readFileSync(file));
    expect(tar.subarray(0, 13).toString()).toBe("manifest.json");

    const imported = await cli(["import", "s1-copy", file]);
    expect(imported.stdout, imported.stderr).toContain(
      "sessionsnapshot/s1-copy imported onto runner runner-a",
    );

    const badEngine = await cli(["import", "s1-other", file, "--engine", "lxc"]);
    expect(badEngine.code).not.toBe(0);
    expect(badEngine.stderr).toContain("--engine must be docker or kubernetes");

    const deleted = await cli(["delete", "snapshot", "s1-copy"]);
    expect(deleted.stdout).toContain("sessionsnapshot/s1-copy deleted");
    const gone = await cli(["delete", "snapshot", "s1-copy"]);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toContain("NOT_FOUND");
  });
});
