/**
 * `get hs -w` over the event stream and `events -f` by name (issue 42), as a user runs them: the
 * real `bin/cli.ts` in a child process against a real server with an in-process runner over the
 * real WebSocket. The resync is set to an hour, so every row printed after the first came from an
 * event on the stream, not from a poll.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultHandler, type FakeRunner } from "../proxy/testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../proxy/testing/test-server.ts";
import { until } from "../test/support/until.ts";

const CLI = join(import.meta.dirname, "cli.ts");
let t: TestServer;
let runner: FakeRunner;

type Running = { out: () => string; err: () => string; exited: Promise<number | null>; child: ChildProcess };

/** The CLI left running (a watch), its output collected as it comes. */
function start(args: string[], env: Record<string, string> = {}, token = ADMIN_TOKEN): Running {
  const child = spawn(process.execPath, [CLI, ...args, "--server", t.server.url, "--token", token], {
    env: { ...process.env, AGENT_SESSIONS_TOKEN: "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
  return { out: () => stdout, err: () => stderr, exited, child };
}

const rowsOf = (text: string, name: string) => text.split("\n").filter((l) => l.startsWith(`${name} `));

beforeAll(async () => {
  t = await startTestServer();
  runner = await t.runner({
    handler: (command) =>
      command.kind === "probe"
        ? { ok: true, result: { endpoint: "10.0.0.9:8080" } }
        : defaultHandler(command),
  });
});
afterAll(async () => {
  runner.kill();
  await t.close();
});

// Each CLI is a Node process (~1 s to start on a loaded machine): budgets, not timings.
describe("agent-sessions get hs -w over the event stream", { timeout: 60_000 }, () => {
  it("prints the header once, then a row per phase change as events bring them; Ctrl-C exits 0", async () => {
    const watch = start(["get", "hs", "-w"], { AGENT_SESSIONS_WATCH_RESYNC_MS: "3600000" });
    const events = start(["events", "-f", "--since", "0"]);
    await until("the watch to start", () => (watch.err().includes("watching") ? true : undefined), 30_000);
    // Created after the watch listed (nothing then): its first event brings its row.
    const put = await t.put("/v1/namespaces/default/harnesssessions/chat", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "chat" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    expect(put.status).toBe(201);
    await until("a Ready row", () =>
      rowsOf(watch.out(), "chat").some((l) => /\bReady\b/.test(l)) ? true : undefined,
    );
    const stopped = await t.call("PATCH", "/v1/namespaces/default/harnesssessions/chat", {
      spec: { desiredState: "stopped" },
    });
    expect(stopped.status).toBe(200);
    await until("a Stopped row", () =>
      rowsOf(watch.out(), "chat").some((l) => /\bStopped\b/.test(l)) ? true : undefined,
    );
    const lines = watch.out().trim().split("\n");
    expect(lines.filter((l) => l.startsWith("NAME ")).length).toBe(1);
    expect(lines[0]).toMatch(/^NAME\s+AGENT\s+DESIRED\s+PHASE/);
    // Each printed row differs from the one before it (a row is printed again only when it changed).
    const rows = rowsOf(watch.out(), "chat");
    for (let i = 1; i < rows.length; i++) expect(rows[i]).not.toBe(rows[i - 1]);
    expect(watch.err()).not.toContain("polling");

    // events -f names the HarnessSession of every frame, status transitions included.
    await until(
      "events to name the session",
      () =>
        /default\/chat\s+status/.test(events.out()) &&
        /default\/chat\s+log\s+\{"event":"PhaseChanged"/.test(events.out())
          ? true
          : undefined,
      10_000,
      { retryErrors: false },
    ).catch((error: unknown) => {
      throw new Error(`${String(error)}\nevents printed:\n${events.out()}\n${events.err()}`);
    });
    expect(events.out()).not.toMatch(/\sses-[0-9a-f]+\s+status/);

    watch.child.kill("SIGINT");
    events.child.kill("SIGINT");
    expect(await watch.exited).toBe(0);
    expect(await events.exited).toBe(0);
  });

  it("get hs NAME -w follows that one session only; the resync finds what no event reports (a deletion)", async () => {
    await t.put("/v1/namespaces/default/harnesssessions/other", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "other" },
      spec: { agentRef: "alice", runtimeRef: "reference", desiredState: "stopped" },
    });
    const watch = start(["get", "hs", "chat", "-w", "-o", "name"], { AGENT_SESSIONS_WATCH_RESYNC_MS: "300" });
    await until(
      "the first row",
      () => (watch.out().includes("harnesssession/chat") ? true : undefined),
      30_000,
    );
    expect(
      (
        await t.call("PATCH", "/v1/namespaces/default/harnesssessions/other", {
          spec: { desiredState: "running" },
        })
      ).status,
    ).toBe(200);
    const before = watch
      .out()
      .split("\n")
      .filter((l) => l === "harnesssession/chat").length;
    expect(
      (
        await t.call("PATCH", "/v1/namespaces/default/harnesssessions/chat", {
          spec: { desiredState: "running" },
        })
      ).status,
    ).toBe(200);
    await until("chat printed again", () =>
      watch
        .out()
        .split("\n")
        .filter((l) => l === "harnesssession/chat").length > before
        ? true
        : undefined,
    );
    expect(watch.out()).not.toContain("other");
    expect((await t.call("DELETE", "/v1/namespaces/default/harnesssessions/chat")).status).toBeLessThan(300);
    await until(
      "its deletion",
      () => (watch.err().includes("harnesssession/chat deleted") ? true : undefined),
      30_000,
    );
    watch.child.kill("SIGINT");
    expect(await watch.exited).toBe(0);
  });

  it("a stream ended for its token (revoked) ends the watch with that error, exit 5", async () => {
    const made = await t.call("POST", "/v1/tokens", { name: "watcher", scopes: ["namespace:default:view"] });
    expect(made.status).toBe(201);
    const watch = start(["get", "hs", "-w"], { AGENT_SESSIONS_WATCH_RESYNC_MS: "3600000" }, made.body.token);
    await until(
      "the first answer",
      () => (watch.out() || watch.err().includes("watching") ? true : undefined),
      30_000,
    );
    // Revoked while the stream is open (it ends with an UNAUTHENTICATED event) or, on a slow
    // machine, just before it opened (refused: UNAUTHENTICATED): the same end, exit 5, no polling.
    expect((await t.call("DELETE", "/v1/tokens/watcher")).status).toBeLessThan(300);
    expect(await watch.exited).toBe(5);
    expect(watch.err()).toMatch(/expired or was revoked|UNAUTHENTICATED|token/i);
    expect(watch.err()).not.toContain("polling");
  });
});
