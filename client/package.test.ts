/**
 * The client as a portal installs it (issue 42): `npm pack` in client/ (its prepack builds ESM and
 * `.d.ts` into dist), the tarball installed with `npm install --prefer-offline` into an empty
 * folder (its one dependency, zod, from the npm cache when it has it, else the registry), then a script there, in
 * its own process, against a real server on port 0; and a TypeScript file there type-checked
 * against the installed `.d.ts`.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../proxy/testing/test-server.ts";

const run = promisify(execFile);
const clientDir = import.meta.dirname;
let t: TestServer;
let dir: string;

const SCRIPT = `
import { AgentSessionsClient, ClientError } from "@agent-sessions/client";
const [url, token] = process.argv.slice(2);
const client = new AgentSessionsClient({ baseUrl: url, token });
const out = {};
out.version = (await client.version()).version;
out.agents = (await client.listAll("agents", "default")).map((a) => a.metadata.name);
const { created } = await client.put("harnesssessions", {
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "HarnessSession",
  metadata: { name: "portal" },
  spec: { agentRef: "alice", runtimeRef: "reference" },
});
out.created = created;
out.unchanged = (await client.put("harnesssessions", {
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "HarnessSession",
  metadata: { name: "portal" },
  spec: { agentRef: "alice", runtimeRef: "reference" },
})).unchanged;
try {
  await client.waitFor("default", "portal", "Ready", { timeoutMs: 1500, pollMs: 200 });
} catch (error) {
  out.waitError = error instanceof ClientError ? error.code : String(error);
}
try {
  await client.get("harnesssessions", "default", "nobody");
} catch (error) {
  out.missing = error instanceof ClientError ? error.code : String(error);
}
console.log(JSON.stringify(out));
`;

const TYPED = `
import { AgentSessionsClient, type HarnessSession } from "@agent-sessions/client";
const client = new AgentSessionsClient({ baseUrl: "http://127.0.0.1:8787" });
const ready: Promise<HarnessSession> = client.waitFor("default", "portal", "Ready", { timeoutMs: 1000 });
// @ts-expect-error: not a phase
client.waitFor("default", "portal", "Readyish");
void ready;
`;

beforeAll(async () => {
  t = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "client-package-"));
}, 60_000);
afterAll(async () => {
  await t.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the installable client package", { timeout: 180_000 }, () => {
  it("packs, installs into an empty folder (npm cache first), and a script there drives a real server", async () => {
    await run("npm", ["pack", "--pack-destination", dir], { cwd: clientDir });
    const tarball = readdirSync(dir).find((f) => f.endsWith(".tgz"));
    expect(tarball).toBe("agent-sessions-client-0.1.0.tgz");
    writeFileSync(
      join(dir, "package.json"),
      JSON.stringify({ name: "portal", private: true, type: "module" }),
    );
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", `./${tarball}`], {
      cwd: dir,
    });
    // The package and its one dependency (the contracts' types are zod's), nothing else.
    const installed = readdirSync(join(dir, "node_modules")).filter((f) => !f.startsWith("."));
    expect(installed.sort()).toEqual(["@agent-sessions", "zod"]);
    writeFileSync(join(dir, "portal.mjs"), SCRIPT);
    const { stdout } = await run(process.execPath, ["portal.mjs", t.server.url, ADMIN_TOKEN], { cwd: dir });
    expect(JSON.parse(stdout)).toEqual({
      version: "0.1.0",
      agents: ["alice"],
      created: true,
      unchanged: true,
      waitError: "DEADLINE_EXCEEDED",
      missing: "NOT_FOUND",
    });
  });

  it("its .d.ts type-check a TypeScript user's code (waitFor takes only phases)", async () => {
    writeFileSync(join(dir, "typed.ts"), TYPED);
    const tsc = createRequire(resolve(clientDir, "..", "package.json")).resolve("typescript/bin/tsc");
    const checked = await run(
      process.execPath,
      [
        tsc,
        "--noEmit",
        "--strict",
        "--skipLibCheck",
        "--module",
        "nodenext",
        "--target",
        "es2023",
        "--types",
        "node",
        "--typeRoots",
        resolve(clientDir, "..", "node_modules", "@types"),
        "typed.ts",
      ],
      { cwd: dir },
    ).then(
      () => ({ code: 0, out: "" }),
      (error: { code: number; stdout: string }) => ({ code: error.code, out: error.stdout }),
    );
    expect(checked.out).toBe("");
    expect(checked.code).toBe(0);
  });
});
