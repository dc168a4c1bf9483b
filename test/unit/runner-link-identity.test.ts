/**
 * The runner's real link (runner/link/link.ts) against the real server (proxy/main.ts) on port 0:
 * registration with the runner token, the issued credential kept 0600 in the data dir and
 * presented on the next start, and a new registration after the server forgot it (PROTOCOL.md §2).
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  ADMIN_TOKEN,
  RUNNER_TOKEN,
  startTestServer,
  type TestServer,
} from "../../proxy/testing/test-server.ts";
import { RunnerLink } from "../../runner/link/link.ts";
import { CREDENTIAL_FILE_NAME } from "../../runner/link/credential.ts";

let t: TestServer | undefined;
let dir = "";
const links: RunnerLink[] = [];
afterEach(async () => {
  for (const link of links.splice(0)) link.close();
  await t?.close();
  t = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function link(server: TestServer, token = RUNNER_TOKEN): RunnerLink {
  const l = new RunnerLink(
    {
      serverUrl: server.server.url,
      token,
      credentialFile: join(dir, CREDENTIAL_FILE_NAME),
      name: "linked",
      engine: "docker",
      capacity: 2,
      labels: {},
      backoffBaseMs: 20,
      backoffMaxMs: 100,
    },
    { sessions: () => [], command: async () => ({}), log: () => {} },
  );
  links.push(l);
  l.start();
  return l;
}

async function attached(l: RunnerLink): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!l.attached) {
    if (Date.now() > deadline) throw new Error("the link did not attach");
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function connected(server: TestServer): Promise<boolean> {
  const reply = await fetch(`${server.server.url}/v1/runners/linked`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  return reply.status === 200 && ((await reply.json()) as { connected: boolean }).connected;
}

describe("the runner link's identity", () => {
  it("registers once with the runner token, keeps its credential 0600, and presents it after a restart", async () => {
    dir = mkdtempSync(join(tmpdir(), "runner-link-"));
    t = await startTestServer();
    const first = link(t);
    await attached(first);
    const file = join(dir, CREDENTIAL_FILE_NAME);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, "utf8")).toMatch(/^asr_/);
    first.close();

    // A restarted runner (a new link over the same data dir) is the same runner: the runner
    // token alone would now be refused for this name.
    const restarted = link(t);
    await attached(restarted);
    expect(await connected(t)).toBe(true);
  });

  it("registers again with the runner token when the server no longer knows its saved credential", async () => {
    dir = mkdtempSync(join(tmpdir(), "runner-link-"));
    t = await startTestServer();
    const first = link(t);
    await attached(first);
    const saved = readFileSync(join(dir, CREDENTIAL_FILE_NAME), "utf8");
    first.close();
    await t.close(); // a server with a new store
    t = await startTestServer();
    const next = link(t);
    await attached(next);
    expect(readFileSync(join(dir, CREDENTIAL_FILE_NAME), "utf8")).not.toBe(saved);
  });
});
