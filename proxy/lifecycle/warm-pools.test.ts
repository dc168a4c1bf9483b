import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { API_VERSION, type Agent, type AgentRuntime } from "../../contracts/resources.ts";
import { Rpc } from "../../contracts/rpc.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { SessionSpec } from "../../contracts/session-spec.ts";
import { testAdmission } from "../testing/test-admission.ts";
import { EventBus } from "./event-bus.ts";
import { Lifecycle } from "./lifecycle.ts";
import { Workspaces } from "./workspaces.ts";
import { NamespaceQuotas } from "./namespace-quotas.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import { SessionJournal } from "./session-journal.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import type { RunnerRecord } from "../store/store.ts";
import { WarmPools } from "./warm-pools.ts";

const IMAGE = `127.0.0.1:5000/reference@sha256:${"b".repeat(64)}`;

type Answer =
  | { ok: true; result: Record<string, unknown> }
  | { ok: false; error: { code: string; message: string } };

/** Runners in memory: record every command, answer with `answer` (a cooperative runner by default). */
function fakeRunners(names: string[]) {
  const sent: { runnerId: string; command: RunnerCommand }[] = [];
  const runners: RunnerRecord[] = names.map((name) => ({
    runner_id: `id-${name}`,
    runner_name: name,
    engine: "docker",
    capacity: 10,
    labels: {},
    draining: false,
    last_seen_at: new Date().toISOString(),
  }));
  let claims = 0;
  const state = {
    warmReady: true,
    answer(command: RunnerCommand): Answer {
      switch (command.kind) {
        case "claim_warm": {
          if (!state.warmReady) return { ok: false, error: { code: "NOT_FOUND", message: "none ready" } };
          claims += 1;
          const name = `pool-${command.pool.split("/")[1]}-00000000000${claims}`;
          const spec = SessionSpec.parse({
            namespace: command.pool.split("/")[0],
            name,
            engine: "docker",
            image: IMAGE,
            contract: "v1alpha2",
          });
          return {
            ok: true,
            result: {
              container_name: `as-${spec.namespace}-${name}`,
              spec,
              adapter_token: `token-${claims}`,
              endpoint: "10.0.0.2:8080",
              resolved_image_digest: "sha256:abc",
            },
          };
        }
        case "provision":
          return { ok: true, result: { container_name: command.container_name, endpoint: "10.0.0.3:8080" } };
        case "start":
          return { ok: true, result: { state: "READY" } };
        default:
          return { ok: true, result: {} };
      }
    },
  };
  const directory: RunnerDirectory = {
    connectedRunners: () => runners,
    isConnected: (id) => runners.some((r) => r.runner_id === id),
    command: (async (runnerId: string, command: RunnerCommand) => {
      sent.push({ runnerId, command });
      return state.answer(command);
    }) as RunnerDirectory["command"],
  };
  return { directory, sent, state };
}

function runtime(name: string, size?: number): AgentRuntime {
  return {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { name, namespace: "ns" },
    spec: {
      image: IMAGE,
      contract: "v1alpha2",
      capabilities: [],
      approved: true,
      ...(size !== undefined ? { warmPool: { size } } : {}),
    },
  };
}

function agent(name: string, runtimeRef: string, model = "m1"): Agent {
  return {
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name, namespace: "ns" },
    spec: {
      runtimeRef,
      credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "KEY_A" } }],
      model: { baseUrl: "http://10.213.0.1:11434/v1", name: model },
      egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
    },
  };
}

let store: SqliteStore;
beforeEach(async () => {
  store = new SqliteStore(":memory:");
  await store.putResource(runtime("pooled", 2));
  await store.putResource(runtime("plain"));
  await store.putResource(agent("a", "pooled"));
  await store.putResource(agent("b", "pooled"));
  await store.putResource(agent("c", "plain"));
});
afterEach(async () => {
  await store.close();
});

function setUp(runnerNames = ["r1"]) {
  const runners = fakeRunners(runnerNames);
  const log = () => {};
  const secretEnv = { KEY_A: "secret-a" };
  const admission = testAdmission();
  const warmPools = new WarmPools({ store, runners: runners.directory, log, secretEnv, admission });
  const base = {
    admission,
    store,
    runners: runners.directory,
    journal: new SessionJournal(store, new EventBus()),
    log,
    secretEnv,
    warmPools,
  };
  const lifecycle = new Lifecycle({ ...base, workspaces: new Workspaces(base) });
  return { runners, warmPools, lifecycle };
}

const spawn = (lifecycle: Lifecycle, agentRef: string, client_request_id = "") =>
  lifecycle.spawn(Rpc.SpawnAgent.request.parse({ agent_ref: agentRef, client_request_id }));

describe("warm pools (server policy)", () => {
  it("asks one runner for a pool per Agent of a runtime with warmPool.size, others get an empty set", async () => {
    const { runners, warmPools } = setUp(["r1", "r2"]);
    await warmPools.sync();
    const sets = runners.sent.filter((s) => s.command.kind === "warm_pools");
    expect(sets).toHaveLength(2);
    const pools = sets.flatMap((s) => (s.command.kind === "warm_pools" ? s.command.pools : []));
    expect(pools.map((p) => [p.pool, p.size]).sort()).toEqual([
      ["ns/a", 2],
      ["ns/b", 2],
    ]);
    for (const p of pools) {
      expect(p.credentials).toEqual({ MODEL_API_KEY: "secret-a" });
      expect(p.template.env.MODEL_NAME).toBe("m1");
      expect(p.template.egress).toEqual([{ cidr: "10.213.0.1/32", port: 11434 }]);
      expect(p.fingerprint).not.toContain("secret-a");
    }
    // A second round keeps every pool on its runner.
    const before = new Map(
      sets.flatMap((s) =>
        s.command.kind === "warm_pools" ? s.command.pools.map((p) => [p.pool, s.runnerId]) : [],
      ),
    );
    runners.sent.length = 0;
    await warmPools.sync();
    for (const s of runners.sent)
      if (s.command.kind === "warm_pools")
        for (const p of s.command.pools) expect(before.get(p.pool)).toBe(s.runnerId);
  });

  it("a runtime whose pool goes to size 0 sends every runner an empty set (the runner destroys its entries)", async () => {
    const { runners, warmPools } = setUp();
    await warmPools.sync();
    await store.putResource(runtime("pooled", 0));
    runners.sent.length = 0;
    await warmPools.sync();
    expect(runners.sent.map((s) => s.command)).toEqual([{ kind: "warm_pools", pools: [] }]);
  });

  it("SpawnAgent claims from the Agent's own pool: no provision, the workspace recorded under the entry's name", async () => {
    const { runners, warmPools, lifecycle } = setUp();
    await warmPools.sync();
    const sync = runners.sent.find((s) => s.command.kind === "warm_pools")?.command;
    runners.sent.length = 0;
    const spawned = await spawn(lifecycle, "ns/a", "req-1");
    expect(spawned).toMatchObject({ container_name: "as-ns-pool-a-000000000001", state: "READY" });
    expect(runners.sent.map((s) => s.command.kind)).toEqual(["claim_warm", "start"]);
    const claim = runners.sent[0]?.command;
    const poolA = sync?.kind === "warm_pools" ? sync.pools.find((p) => p.pool === "ns/a") : undefined;
    expect(claim).toEqual({ kind: "claim_warm", pool: "ns/a", fingerprint: poolA?.fingerprint });
    const workspace = await store.getWorkspace("as-ns-pool-a-000000000001");
    expect(workspace).toMatchObject({
      agent_ref: "ns/a",
      status: "ready",
      adapter_token: "token-1",
      // Keyed with the agent (issue 17): another namespace's req-1 is another request.
      client_request_id: "ns/a|req-1",
      endpoint: "10.0.0.2:8080",
    });
    expect(workspace?.spec.name).toBe("pool-a-000000000001");
    // A retry of the same request is the same workspace, nothing claimed again.
    runners.sent.length = 0;
    expect((await spawn(lifecycle, "ns/a", "req-1")).container_name).toBe("as-ns-pool-a-000000000001");
    expect(runners.sent).toEqual([]);
    // Another account claims from its own pool.
    const other = await spawn(lifecycle, "ns/b");
    expect(other.container_name).toBe("as-ns-pool-b-000000000002");
    expect(runners.sent.find((s) => s.command.kind === "claim_warm")?.command).toMatchObject({
      pool: "ns/b",
    });
  });

  it("falls back to provisioning when no entry is ready, or the runtime has no pool", async () => {
    const { runners, warmPools, lifecycle } = setUp();
    await warmPools.sync();
    runners.state.warmReady = false;
    runners.sent.length = 0;
    const a = await spawn(lifecycle, "ns/a");
    expect(runners.sent.map((s) => s.command.kind)).toEqual(["claim_warm", "provision", "start"]);
    // Provisioned the slow way, the workspace gets the same grant an entry would have.
    expect(runners.sent[1]?.command).toMatchObject({
      kind: "provision",
      gateway: { agent: "ns/a", upstream: "http://10.213.0.1:11434/v1" },
    });
    expect(a.container_name).toMatch(/^as-ns-a-/);
    runners.sent.length = 0;
    await spawn(lifecycle, "ns/c");
    expect(runners.sent.map((s) => s.command.kind)).toEqual(["provision", "start"]);
  });

  it("claims only entries made from the Agent as it is now (a changed Agent changes the fingerprint)", async () => {
    const { runners, warmPools, lifecycle } = setUp();
    await warmPools.sync();
    const first = runners.sent.find((s) => s.command.kind === "warm_pools")?.command;
    await store.putResource(agent("a", "pooled", "m2"));
    runners.sent.length = 0;
    await spawn(lifecycle, "ns/a");
    const claim = runners.sent.find((s) => s.command.kind === "claim_warm")?.command;
    const old = first?.kind === "warm_pools" ? first.pools.find((p) => p.pool === "ns/a")?.fingerprint : "";
    expect(claim?.kind === "claim_warm" && claim.fingerprint).not.toBe(old);
  });

  it("each pool carries the Agent's gateway grant, and a changed grant changes the fingerprint", async () => {
    const { runners, warmPools } = setUp();
    const fingerprintOfA = async () => {
      runners.sent.length = 0;
      await warmPools.sync();
      const set = runners.sent.find((s) => s.command.kind === "warm_pools")?.command;
      const pool = set?.kind === "warm_pools" ? set.pools.find((p) => p.pool === "ns/a") : undefined;
      return { gateway: pool?.gateway, fingerprint: pool?.fingerprint };
    };
    const first = await fingerprintOfA();
    expect(first.gateway).toEqual({ agent: "ns/a", upstream: "http://10.213.0.1:11434/v1" });
    // The same Agent again: the same entries stay claimable.
    expect((await fingerprintOfA()).fingerprint).toBe(first.fingerprint);
    const limited = agent("a", "pooled");
    limited.spec.limits = { requestsPerMinute: 30 };
    await store.putResource(limited);
    const second = await fingerprintOfA();
    expect(second.gateway).toEqual({
      agent: "ns/a",
      upstream: "http://10.213.0.1:11434/v1",
      limits: { requestsPerMinute: 30 },
    });
    expect(second.fingerprint).not.toBe(first.fingerprint);
    const narrowed = agent("a", "pooled");
    narrowed.spec.limits = { requestsPerMinute: 30 };
    if (narrowed.spec.model) narrowed.spec.model.allowedModels = ["m1"];
    await store.putResource(narrowed);
    const third = await fingerprintOfA();
    expect(third.gateway?.models).toEqual(["m1"]);
    expect(third.fingerprint).not.toBe(second.fingerprint);
  });

  it("a claim is a placement: never from a runner the selector does not match, nor from a draining one", async () => {
    const { runners, warmPools, lifecycle } = setUp(["r1", "r2"]);
    await warmPools.sync();
    const holderOf = (pool: string) =>
      runners.sent.find(
        (s) => s.command.kind === "warm_pools" && s.command.pools.some((p) => p.pool === pool),
      )?.runnerId;
    const [holderA, holderB] = [holderOf("ns/a"), holderOf("ns/b")];
    const records = runners.directory.connectedRunners();
    for (const r of records) r.labels = { zone: r.runner_id === holderA ? "pool" : "other" };
    runners.sent.length = 0;
    await lifecycle.spawn(
      Rpc.SpawnAgent.request.parse({
        agent_ref: "ns/a",
        client_request_id: "",
        runner_selector: { zone: "other" },
      }),
    );
    expect(runners.sent.map((s) => s.command.kind)).toEqual(["provision", "start"]);
    expect(runners.sent[0]?.runnerId).not.toBe(holderA);
    const b = records.find((r) => r.runner_id === holderB);
    if (!b) throw new Error("no holder of ns/b");
    b.draining = true;
    runners.sent.length = 0;
    await spawn(lifecycle, "ns/b");
    expect(runners.sent.map((s) => s.command.kind)).toEqual(["provision", "start"]);
    expect(runners.sent[0]?.runnerId).not.toBe(holderB);
  });

  it("an Agent whose credentials do not resolve gets no pool, said once in the log", async () => {
    const runners = fakeRunners(["r1"]);
    const logged: string[] = [];
    const warmPools = new WarmPools({
      store,
      runners: runners.directory,
      log: (_level, msg) => logged.push(msg),
      secretEnv: {},
    });
    await warmPools.sync();
    await warmPools.sync();
    expect(runners.sent.map((s) => s.command)).toEqual([
      { kind: "warm_pools", pools: [] },
      { kind: "warm_pools", pools: [] },
    ]);
    expect(logged.filter((m) => m === "no warm pool for agent")).toHaveLength(2); // a and b, once each
  });

  it("without a connected runner holding the pool, nothing is claimed", async () => {
    const { runners, lifecycle } = setUp();
    // No sync yet: no pool is assigned.
    await spawn(lifecycle, "ns/a");
    expect(runners.sent.map((s) => s.command.kind)).toEqual(["provision", "start"]);
  });
});

describe("warm pool entries take runner capacity", () => {
  it("a pool goes only to a runner with room for all its entries, and placement counts them", async () => {
    const { runners, warmPools, lifecycle } = setUp(["r1"]);
    const [r1] = runners.directory.connectedRunners();
    if (r1) r1.capacity = 3;
    await warmPools.sync();
    // Two Agents on the pooled runtime (size 2): only one pool fits in a capacity of 3.
    const last = runners.sent.filter((s) => s.command.kind === "warm_pools").at(-1)?.command;
    expect(last?.kind === "warm_pools" ? last.pools.map((p) => p.pool) : []).toEqual(["ns/a"]);
    expect(warmPools.reservedByRunner().get("id-r1")).toBe(2);
    // One place is left: the plain Agent's first workspace fits, its second does not.
    runners.state.warmReady = false;
    await spawn(lifecycle, "ns/c", "c1");
    await expect(
      lifecycle.workspaces.provision(
        Rpc.ProvisionAgentWorkspace.request.parse({
          agent_ref: "ns/c",
          workstream: "w2",
          client_request_id: "c2",
        }),
      ),
    ).rejects.toMatchObject({ code: "RESOURCE_EXHAUSTED" });
  });
});

describe("warm pools within the namespace quota", () => {
  it("pools written before the quota get what is left of it, and the cut is logged naming the setting", async () => {
    const runners = fakeRunners(["r1"]);
    const logged: string[] = [];
    const admission = testAdmission();
    admission.quotas = new NamespaceQuotas({ warmPoolEntries: { byNamespace: { ns: 3 } } });
    const warmPools = new WarmPools({
      store,
      runners: runners.directory,
      log: (_level, _message, fields) => logged.push(String(fields?.error ?? "")),
      secretEnv: { KEY_A: "secret-a" },
      admission,
    });
    await warmPools.sync();
    const pools = runners.sent.flatMap((s) => (s.command.kind === "warm_pools" ? s.command.pools : []));
    // a and b ask for 2 each: 3 in all fit, a keeps 2, b gets 1.
    expect(pools.map((p) => [p.pool, p.size])).toEqual([
      ["ns/a", 2],
      ["ns/b", 1],
    ]);
    expect(warmPools.reservedByRunner().get("id-r1")).toBe(3);
    expect(logged.join("\n")).toMatch(
      /namespace ns .*quota of 3 .*AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES/,
    );
  });
});
