/**
 * Stack locks and concurrency with the real CLI on a file backend: an `up` killed mid-update
 * (its Node process and the Pulumi CLI under it, SIGKILL) leaves the stack locked; the next
 * operation of a StackManager recovers that lock, says so in its log and succeeds. Two sessions'
 * stacks go up at once in one process.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type Docker from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import type { SessionSpecInput } from "../../contracts/session-spec.ts";
import type { StackManager } from "../../stacks/index.ts";
import { PROJECT_NAME } from "../../stacks/options.ts";
import { lockHolders } from "../../stacks/stale-lock.ts";
import {
  dockerClient,
  dockerObjectsOf,
  removeSessionLeftovers,
  type LogLine,
  repoRoot,
  stackManagerFor,
  tempDir,
  uniqueName,
  until,
} from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const docker: Docker = dockerClient();
const namespace = "engine";
const secrets = { credentials: {}, adapterToken: "lock-test-token" };
const made: { manager: StackManager; name: string; dataDir: string }[] = [];
const children: ChildProcess[] = [];

function spec(name: string): SessionSpecInput {
  return { namespace, name, engine: "docker", image: referenceImage().image, contract: "v1alpha2" };
}

/** Starts `up` in a child process group; resolves once the engine streamed its first resource event. */
async function upUntilFirstProgress(dataDir: string, name: string): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    [join(repoRoot, "test/engine/killable-up.ts"), JSON.stringify({ dataDir, spec: spec(name), secrets })],
    // Its own process group, so one kill takes the Pulumi CLI and its plugins down with it.
    { detached: true, stdio: ["ignore", "pipe", "pipe"], env: process.env },
  );
  children.push(child);
  let out = "";
  let err = "";
  child.stderr?.on("data", (d: Buffer) => {
    err += d;
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => {
      out += d;
      if (out.includes("PROGRESS ")) resolve();
    });
    child.on("exit", (code) => reject(new Error(`up exited (${code}) before any progress:\n${out}\n${err}`)));
  });
  return child;
}

/** Live descendants of `pid`, read from /proc (the CLI starts some plugins in their own groups). */
function descendants(pid: number): number[] {
  const childrenOf = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid …": comm may hold spaces, so read after its closing parenthesis.
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    childrenOf.set(ppid, [...(childrenOf.get(ppid) ?? []), Number(entry)]);
  }
  const found: number[] = [];
  const visit = (p: number) => {
    for (const c of childrenOf.get(p) ?? []) {
      found.push(c);
      visit(c);
    }
  };
  visit(pid);
  return found;
}

/** SIGKILL of the child, the Pulumi CLI under it and every plugin they started: a crash. */
function killTree(child: ChildProcess): number[] {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return [];
  const tree = descendants(child.pid);
  process.kill(-child.pid, "SIGKILL");
  for (const pid of tree) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone with its group
    }
  }
  return tree;
}

afterAll(async () => {
  for (const child of children) {
    try {
      killTree(child);
    } catch {
      // already gone
    }
  }
  for (const { manager, name } of made) {
    if (await manager.exists(namespace, name).catch(() => false)) {
      await manager
        .destroy(namespace, name)
        .catch((e: unknown) => console.error("cleanup destroy failed", e));
    }
    await removeSessionLeftovers(docker, name);
  }
  // Only now: sessions share a data dir (their backend) with others destroyed after them.
  for (const dataDir of new Set(made.map((m) => m.dataDir)))
    rmSync(dataDir, { recursive: true, force: true });
});

describe("stack locks and concurrency (real CLI, file backend)", () => {
  it("recovers the lock of an up killed mid-update, logs it, and the next up succeeds", async () => {
    const dataDir = tempDir("stack-locks");
    const name = uniqueName("killed");
    const stackName = `${namespace}--${name}`;
    const logs: LogLine[] = [];
    const { manager } = await stackManagerFor(dataDir, logs);
    made.push({ manager, name, dataDir });
    const backendDir = manager.options.backendDir!;

    const child = await upUntilFirstProgress(dataDir, name);
    // The engine is mid-update: it holds the stack's lock.
    const held = await lockHolders(backendDir, PROJECT_NAME, stackName);
    expect(held).toHaveLength(1);
    const killed = killTree(child);
    expect(killed).toContain(held[0]!.pid);
    await until("every killed process to be gone", 10, () =>
      killed.every((pid) => !isAlive(pid)) ? true : undefined,
    );
    // The holder is dead; its lock file is still there.
    expect(await lockHolders(backendDir, PROJECT_NAME, stackName)).toEqual(held);

    const outputs = await manager.up(spec(name), secrets);
    expect(outputs.replicas).toBe(1);
    const warning = logs.find((l) => l.level === "warn" && l.msg.startsWith("recovering a stack lock"));
    expect(warning?.fields).toMatchObject({ stack: stackName, op: "up" });
    expect(await lockHolders(backendDir, PROJECT_NAME, stackName)).toEqual([]);
    const { containers } = await dockerObjectsOf(docker, name);
    expect(containers.map((c) => c.State)).toEqual(["running"]);
  });

  it("brings two sessions' stacks up concurrently in one process", async () => {
    const dataDir = tempDir("stack-concurrent");
    const { manager } = await stackManagerFor(dataDir);
    const names = [uniqueName("left"), uniqueName("right")];
    for (const name of names) made.push({ manager, name, dataDir });

    const outputs = await Promise.all(names.map((name) => manager.up(spec(name), secrets)));
    expect(outputs.map((o) => o.replicas)).toEqual([1, 1]);
    expect(new Set(outputs.map((o) => o.endpoint)).size).toBe(2);
    expect((await manager.list()).sort()).toEqual(names.map((n) => `${namespace}--${n}`).sort());
    for (const o of outputs) {
      const ready = await fetch(`http://${o.endpoint}/readyz`, { signal: AbortSignal.timeout(5000) });
      expect(ready.status).toBe(200);
    }
  });
});

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
