import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import { AgentSessions } from "./agent-sessions.ts";
import { FakeDriver } from "../engine/fake-driver.ts";
import { entryName, type WarmPoolConfig, WarmPool } from "./warm-pool.ts";

const IMAGE = `127.0.0.1:5000/reference@sha256:${"a".repeat(64)}`;

function template(namespace = "ns"): SessionSpec {
  return SessionSpec.parse({ namespace, name: "pool", engine: "docker", image: IMAGE, contract: "v1alpha2" });
}

function config(pool: string, size: number, fingerprint = "f1"): WarmPoolConfig {
  return { pool, size, fingerprint, template: template(pool.split("/")[0]), credentials: { KEY: "v" } };
}

/**
 * The engine in memory (runner/engine/fake-driver.ts): provisioned containers run until removed;
 * agents say one frame at start and end when stopped (or when `exit` ends them, as a crash would);
 * the first `failProvisions` provisions fail half made.
 */
function fakeEngine(options: { failProvisions?: number } = {}): FakeDriver {
  const engine = new FakeDriver();
  engine.failProvisions = options.failProvisions ?? 0;
  return engine;
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function stateFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "warm-pool-"));
  dirs.push(dir);
  return join(dir, "warm-pool.json");
}

function setUp(engine = fakeEngine(), file = stateFile()) {
  const frames: { session: string; message: unknown }[] = [];
  const states: string[] = [];
  const sessions = new AgentSessions(engine, {
    frame: (session, frame) => frames.push({ session, message: frame.payload.message }),
    state: (session, state) => states.push(`${session}:${state}`),
  });
  const pool = new WarmPool({
    driver: engine,
    agents: sessions,
    log: () => {},
    stateFile: file,
    retryMs: 20,
  });
  return { engine, sessions, pool, frames, states, file };
}

describe("the runner's warm pool", () => {
  it("fills each pool to its size, agents pre-started, each entry with its own name, volume and token", async () => {
    const { engine, pool, sessions } = setUp();
    pool.start();
    expect(pool.configure([config("ns/a", 2), config("ns/b", 1)])).toEqual({ "ns/a": 0, "ns/b": 0 });
    await pool.settled();
    expect(pool.readyCounts()).toEqual({ "ns/a": 2, "ns/b": 1 });
    expect(engine.machine.running.size).toBe(3);
    const tokens = engine.provisions.map((p) => p.secrets.adapterToken);
    expect(new Set(tokens).size).toBe(3);
    for (const p of engine.provisions) {
      expect(p.containerName).toMatch(/^as-ns-pool-[ab]-[0-9a-f]{12}$/);
      expect(workloadName(p.spec.namespace, p.spec.name)).toBe(p.containerName);
      expect(p.secrets.credentials).toEqual({ KEY: "v" });
      expect(sessions.hasWarm(p.containerName)).toBe(true);
      expect(pool.isUnclaimed(p.containerName)).toBe(true);
    }
  });

  it("hands an entry out once, only to its own pool and fingerprint, and refills behind it", async () => {
    const { engine, pool } = setUp();
    pool.start();
    pool.configure([config("ns/a", 1), config("ns/b", 1)]);
    await pool.settled();
    expect(() => pool.claim("ns/a", "other-fingerprint")).toThrow(/no warm workspace/);
    const first = pool.claim("ns/a", "f1");
    expect(first.pool).toBe("ns/a");
    expect(first.spec.name).toBe(first.containerName.replace(/^as-ns-/, ""));
    expect(pool.isUnclaimed(first.containerName)).toBe(false);
    // Claimed before the refill is ready: none left for a second claim.
    expect(() => pool.claim("ns/a", "f1")).toThrow(/no warm workspace/);
    await pool.settled();
    expect(pool.readyCounts()).toEqual({ "ns/a": 1, "ns/b": 1 });
    const second = pool.claim("ns/a", "f1");
    expect(second.containerName).not.toBe(first.containerName);
    expect(second.adapterToken).not.toBe(first.adapterToken);
    // The claimed ones stay: the pool never destroys what it handed out.
    await pool.settled();
    expect(engine.machine.running.has(first.containerName)).toBe(true);
    expect(engine.machine.running.has(second.containerName)).toBe(true);
  });

  it("a session adopts the pre-started agent: READY at once, with the frames it held", async () => {
    const { pool, sessions, frames, states } = setUp();
    pool.start();
    pool.configure([config("ns/a", 1)]);
    await pool.settled();
    const entry = pool.claim("ns/a", "f1");
    expect(await sessions.start("s1", entry.containerName)).toBe("READY");
    expect(states).toEqual(["s1:READY"]);
    expect(frames).toEqual([{ session: "s1", message: "agent started" }]);
    expect(sessions.hasWarm(entry.containerName)).toBe(false);
    expect(sessions.report()).toEqual([
      { session_id: "s1", container_name: entry.containerName, state: "READY" },
    ]);
  });

  it("an openai-chat runtime's pool: entries provisioned with nothing pre-started, kept, handed out, and the session READY without an exec", async () => {
    const { engine, pool, sessions } = setUp();
    pool.start();
    const harness = SessionSpec.parse({
      ...template("ns"),
      session: { protocol: "openai-chat", port: 9090 },
    });
    pool.configure([{ ...config("ns/o", 2), template: harness }]);
    await pool.settled();
    expect(pool.readyCounts()).toEqual({ "ns/o": 2 });
    expect(engine.starts).toEqual([]);
    // Not taken for entries that lost their agent: still both there after another round.
    pool.configure([{ ...config("ns/o", 2), template: harness }]);
    await pool.settled();
    expect(pool.readyCounts()).toEqual({ "ns/o": 2 });
    expect(engine.provisions).toHaveLength(2);
    const entry = pool.claim("ns/o", "f1");
    expect(await sessions.start("s1", entry.containerName, undefined, "none")).toBe("READY");
    expect(engine.starts).toEqual([]);
  });

  it("destroys entries of pools no longer asked for, of an older fingerprint, or beyond the size", async () => {
    const { engine, pool } = setUp();
    pool.start();
    pool.configure([config("ns/a", 2), config("ns/b", 1)]);
    await pool.settled();
    pool.configure([config("ns/a", 1)]);
    await pool.settled();
    expect(pool.readyCounts()).toEqual({ "ns/a": 1 });
    expect(engine.machine.running.size).toBe(1);
    const [kept] = engine.machine.running;
    pool.configure([config("ns/a", 1, "f2")]);
    await pool.settled();
    expect(engine.machine.running.has(kept ?? "")).toBe(false);
    expect(engine.machine.running.size).toBe(1);
    expect(() => pool.claim("ns/a", "f1")).toThrow(/no warm workspace/);
    pool.configure([]);
    await pool.settled();
    expect(engine.machine.running.size).toBe(0);
  });

  it("never hands out an entry whose agent died; destroys it and replaces it", async () => {
    const { engine, pool } = setUp();
    pool.start();
    pool.configure([config("ns/a", 1)]);
    await pool.settled();
    const [dead] = engine.machine.running;
    engine.agents.get(dead ?? "")?.exit(137);
    await new Promise((r) => setTimeout(r, 10));
    expect(() => pool.claim("ns/a", "f1")).toThrow(/no warm workspace/);
    await pool.settled();
    expect(engine.removed).toContain(dead);
    expect(pool.readyCounts()).toEqual({ "ns/a": 1 });
    expect(pool.claim("ns/a", "f1").containerName).not.toBe(dead);
  });

  it("a failed provisioning leaves nothing behind and is retried", async () => {
    const { engine, pool } = setUp(fakeEngine({ failProvisions: 1 }));
    pool.start();
    pool.configure([config("ns/a", 1)]);
    await pool.settled();
    await new Promise((r) => setTimeout(r, 50));
    await pool.settled();
    expect(engine.removed).toHaveLength(1);
    expect(pool.readyCounts()).toEqual({ "ns/a": 1 });
    expect(engine.machine.running.size).toBe(1);
  });

  it("lists unclaimed entries on disk; a restarted runner destroys them, not the claimed ones", async () => {
    const engine = fakeEngine();
    const first = setUp(engine);
    first.pool.start();
    first.pool.configure([config("ns/a", 2)]);
    await first.pool.settled();
    const claimed = first.pool.claim("ns/a", "f1");
    await first.pool.settled(); // refilled
    first.pool.stop();
    const listed = (JSON.parse(readFileSync(first.file, "utf8")) as { unclaimed: string[] }).unclaimed;
    expect(listed).toHaveLength(2);
    expect(listed).not.toContain(claimed.containerName);

    const restarted = setUp(engine, first.file);
    restarted.pool.start();
    await restarted.pool.settled();
    expect(engine.removed).toEqual(listed);
    expect([...engine.machine.running]).toEqual([claimed.containerName]);
  });

  it("reads a missing or foreign state file as empty", async () => {
    const file = stateFile();
    writeFileSync(file, '{"something": "else"}');
    const { pool, engine } = setUp(fakeEngine(), file);
    pool.start();
    await pool.settled();
    expect(engine.removed).toEqual([]);
  });

  it("names entries as DNS labels apart from ordinary workspace names", () => {
    for (const pool of ["ns/a", `ns/${"x".repeat(63)}`, "ns/--"]) {
      const name = entryName(pool);
      expect(name).toMatch(/^pool-([a-z0-9-]*[a-z0-9]-)?[0-9a-f]{12}$/);
      expect(name.length).toBeLessThanOrEqual(63);
      expect(name).not.toContain("--");
    }
    expect(entryName("ns/a")).not.toBe(entryName("ns/a"));
  });
});
