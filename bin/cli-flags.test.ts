/**
 * The CLI's kubectl-like surface (issue 42), as a user runs it: the real `bin/cli.ts` in a child
 * process against a real server on port 0 (no runner: sessions stay Pending, which is all these
 * need). Global flags anywhere, `-o wide|name`, `-A`, `-w`, `version`, per-command help,
 * "unchanged" on an identical apply, hints in CLI terms and one exit code per kind of failure.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../proxy/testing/test-server.ts";
import { type CliResult, runCli } from "./testing-cli.ts";

const CLI = join(import.meta.dirname, "cli.ts");
let t: TestServer;

/** The CLI with `--server` and `--token` appended (after the command). */
function cli(args: string[], token = ADMIN_TOKEN): Promise<CliResult> {
  return runCli(t.server.url, token, args);
}

/** The CLI with exactly `args` (the test puts the global flags where it wants them). */
function bare(args: string[], input?: string): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, AGENT_SESSIONS_TOKEN: "", AGENT_SESSIONS_SERVER_URL: "" } },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end(input ?? "");
  });
}

const SESSION = (name: string, desired = "running") =>
  `apiVersion: agent-sessions.dev/v1alpha1\nkind: HarnessSession\nmetadata: {name: ${name}}\nspec: {agentRef: alice, runtimeRef: reference, desiredState: ${desired}}\n`;

beforeAll(async () => {
  t = await startTestServer();
  // A second namespace with an Agent, for -A.
  const put = await t.put("/v1/namespaces/team-b/agents/bob", {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "bob" },
    spec: { runtimeRef: "reference" },
  });
  expect(put.status).toBe(201);
});
afterAll(async () => {
  await t.close();
});

// Each step starts the CLI (a Node process, ~1 s on a loaded machine): a budget, not a timing.
describe("agent-sessions: global flags, output formats, help, version", { timeout: 60_000 }, () => {
  it("takes the global flags before the command as after it", async () => {
    const before = await bare(["--server", t.server.url, "--token", ADMIN_TOKEN, "get", "agents"]);
    expect(before.stderr).toBe("");
    expect(before.code).toBe(0);
    expect(before.stdout).toContain("alice");
    const mixed = await bare([
      `--server=${t.server.url}`,
      "-n",
      "team-b",
      "get",
      "agents",
      "--token",
      ADMIN_TOKEN,
    ]);
    expect(mixed.code).toBe(0);
    expect(mixed.stdout).toContain("bob");
    expect(mixed.stdout).not.toContain("alice");
  });

  it("-o name prints kind/name lines; -o wide adds columns; a bad -o is a usage error", async () => {
    const names = await cli(["get", "agents", "-o", "name"]);
    expect(names.stdout.trim().split("\n")).toEqual(["agent/alice"]);
    const wide = await cli(["get", "agents", "-o", "wide"]);
    expect(wide.stdout.split("\n")[0]).toMatch(
      /NAME\s+RUNTIME\s+MODEL\s+CREDENTIALS\s+AGE\s+MODEL URL\s+CREDENTIAL NAMES/,
    );
    const narrow = await cli(["get", "agents"]);
    expect(narrow.stdout).not.toContain("MODEL URL");
    const bad = await cli(["get", "agents", "-o", "xml"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("-o must be table, wide, name, json or yaml, got xml");
  });

  it("-A lists every namespace with a NAMESPACE column (admin), and a namespace token is refused", async () => {
    const all = await cli(["get", "agents", "-A"]);
    expect(all.code).toBe(0);
    const lines = all.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^NAMESPACE\s+NAME\s+RUNTIME/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 2).join("/"))).toEqual([
      "default/alice",
      "team-b/bob",
    ]);
    expect((await cli(["get", "agents", "-A", "-o", "name"])).stdout.trim().split("\n")).toEqual([
      "agent/alice",
      "agent/bob",
    ]);
    const created = await cli(["token", "create", "--name", "viewer", "--scope", "namespace:default:view"]);
    const viewer = created.stdout.trim().split("\n").at(-1) ?? "";
    const refused = await cli(["get", "agents", "-A"], viewer);
    expect(refused.code).toBe(5);
    expect(refused.stderr).toContain("PERMISSION_DENIED");
    expect((await cli(["get", "agents", "-A", "-n", "team-b"])).code).toBe(2);
  });

  it("help COMMAND and COMMAND --help print its flags and examples; help lists version", async () => {
    const help = await bare(["help", "get"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("-w, --watch");
    expect(help.stdout).toContain("-A, --all-namespaces");
    expect(help.stdout).toContain("examples:");
    expect(help.stdout).toContain("agent-sessions get hs -o wide");
    expect(help.stdout).toContain("exit codes: 0 ok");
    const flag = await bare(["--token", "x", "apply", "--help"]);
    expect(flag.code).toBe(0);
    expect(flag.stdout).toContain("-f, --filename FILE");
    expect(flag.stdout).toContain('"unchanged"');
    expect((await bare(["--help"])).stdout).toMatch(/\n {2}version\s+the CLI's version/);
    const unknown = await bare(["help", "frobnicate"]);
    expect(unknown.code).toBe(2);
  });

  it("version prints the CLI's and the server's; an unreachable server is a note, not a failure", async () => {
    const both = await cli(["version"]);
    expect(both.code).toBe(0);
    expect(both.stdout).toMatch(
      /^Client Version: 0\.1\.0 \(node [0-9.]+\)\nServer Version: 0\.1\.0 \(API agent-sessions\.dev\/v1alpha1/,
    );
    const json = JSON.parse((await cli(["version", "-o", "json"])).stdout);
    expect(json).toMatchObject({ client: { version: "0.1.0" }, server: { version: "0.1.0" } });
    const away = await bare(["version", "--server", "http://127.0.0.1:1"]);
    expect(away.code).toBe(0);
    expect(away.stdout).toContain("Client Version: 0.1.0");
    expect(away.stdout).not.toContain("Server Version");
    expect(away.stderr).toContain("UNAVAILABLE");
  });
});

describe("agent-sessions apply: unchanged", { timeout: 60_000 }, () => {
  it("an identical apply says unchanged and keeps the generation; a change says configured and bumps it", async () => {
    expect(
      (await bare(["apply", "-f", "-", "--server", t.server.url, "--token", ADMIN_TOKEN], SESSION("same")))
        .stdout,
    ).toBe("harnesssession/same created\n");
    const again = await bare(
      ["apply", "-f", "-", "--server", t.server.url, "--token", ADMIN_TOKEN],
      SESSION("same"),
    );
    expect(again.code).toBe(0);
    expect(again.stdout).toBe("harnesssession/same unchanged\n");
    expect(
      (await t.call("GET", "/v1/namespaces/default/harnesssessions/same")).body.metadata.generation,
    ).toBe(1);
    const changed = await bare(
      ["apply", "-f", "-", "--server", t.server.url, "--token", ADMIN_TOKEN],
      SESSION("same", "stopped"),
    );
    expect(changed.stdout).toBe("harnesssession/same configured\n");
    expect(
      (await t.call("GET", "/v1/namespaces/default/harnesssessions/same")).body.metadata.generation,
    ).toBe(2);
    // Agents too: the same manifest twice is unchanged.
    const agent =
      "apiVersion: agent-sessions.dev/v1alpha1\nkind: Agent\nmetadata: {name: carol}\nspec: {runtimeRef: reference}\n";
    const args = ["apply", "-f", "-", "--server", t.server.url, "--token", ADMIN_TOKEN];
    expect((await bare(args, agent)).stdout).toBe("agent/carol created\n");
    expect((await bare(args, agent)).stdout).toBe("agent/carol unchanged\n");
  });
});

describe("agent-sessions exit codes and hints", { timeout: 60_000 }, () => {
  it("2 usage, 3 not found, 4 conflict, 5 permission, 6 invalid, 7 unavailable, each documented in help", async () => {
    expect((await cli(["get", "widgets"])).code).toBe(2);
    expect((await cli(["get", "agent", "nobody"])).code).toBe(3);
    const args = ["create", "-f", "-", "--server", t.server.url, "--token", ADMIN_TOKEN];
    const agent =
      "apiVersion: agent-sessions.dev/v1alpha1\nkind: Agent\nmetadata: {name: dup}\nspec: {runtimeRef: reference}\n";
    expect((await bare(args, agent)).code).toBe(0);
    expect((await bare(args, agent)).code).toBe(4);
    const unauthenticated = await cli(["get", "agents"], "not-the-token-0123456789");
    expect(unauthenticated.code).toBe(5);
    expect(unauthenticated.stderr).toContain("UNAUTHENTICATED");
    const invalid = await bare(
      ["apply", "-f", "-", "--server", t.server.url, "--token", ADMIN_TOKEN],
      "apiVersion: agent-sessions.dev/v1alpha1\nkind: Agent\nmetadata: {name: broken}\nspec: {}\n",
    );
    expect(invalid.code).toBe(6);
    expect(invalid.stderr).toContain("INVALID_ARGUMENT");
    const unavailable = await bare([
      "get",
      "agents",
      "--server",
      "http://127.0.0.1:1",
      "--token",
      ADMIN_TOKEN,
    ]);
    expect(unavailable.code).toBe(7);
    expect(unavailable.stderr).toContain("hint: is the server running?");
    const help = (await bare(["--help"])).stdout;
    for (const text of [
      "3 not found",
      "4 precondition or conflict",
      "5 permission denied",
      "6 invalid",
      "7 unavailable",
    ])
      expect(help).toContain(text);
  });

  it("names the CLI command, not the HTTP route: a token name in use says token revoke", async () => {
    expect(
      (await cli(["token", "create", "--name", "twice", "--scope", "namespace:default:view"])).code,
    ).toBe(0);
    const again = await cli(["token", "create", "--name", "twice", "--scope", "namespace:default:view"]);
    expect(again.code).toBe(4);
    expect(again.stderr).toContain("`agent-sessions token revoke twice`");
    expect(again.stderr).not.toContain("/v1/tokens");
  });
});

describe("agent-sessions get -w", { timeout: 60_000 }, () => {
  // No runner here: no agent session, so no event reports these changes; the resync (set short) finds them.
  it("prints the object, then again when it changes, then its deletion; Ctrl-C ends it with exit 0", async () => {
    await t.put("/v1/namespaces/default/harnesssessions/watched", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "watched" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    const child: ChildProcess = spawn(
      process.execPath,
      [CLI, "get", "hs", "-w", "-o", "name", "--server", t.server.url, "--token", ADMIN_TOKEN],
      {
        env: { ...process.env, AGENT_SESSIONS_TOKEN: "", AGENT_SESSIONS_WATCH_RESYNC_MS: "300" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
    const until = async (check: () => boolean) => {
      while (!check()) await new Promise((r) => setTimeout(r, 100));
    };
    await until(() => stdout.includes("harnesssession/watched"));
    const before = stdout.split("\n").filter((l) => l === "harnesssession/watched").length;
    await t.call("PATCH", "/v1/namespaces/default/harnesssessions/watched", {
      spec: { desiredState: "stopped" },
    });
    await until(() => stdout.split("\n").filter((l) => l === "harnesssession/watched").length > before);
    await t.call("DELETE", "/v1/namespaces/default/harnesssessions/watched");
    await until(() => stderr.includes("harnesssession/watched deleted"));
    child.kill("SIGINT");
    expect(await exited).toBe(0);
  });
});
