import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import type { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ResultRecord } from "../../contracts/adapter.ts";
import { ApiErrorBody, httpStatusOf } from "../../contracts/errors.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import { RpcMethod } from "../../contracts/rpc.ts";
import { RUNNER_PROTOCOL_VERSION } from "../../contracts/runner-protocol.ts";
import { type ComposedServer, composeServer } from "../compose-server.ts";
import { defaultSettings } from "../config.ts";
import type { RunningHarness } from "../harness-wiring.ts";
import type { Lifecycle } from "../lifecycle/lifecycle.ts";
import type { Logger } from "../observability/log.ts";
import { MAX_JSON_DEPTH } from "../lifecycle/request-body.ts";
import { RUNNER_CONNECT_PATH, type RunnerHub } from "../runners/runner-hub.ts";
import type { Store } from "../store/store.ts";
import { defaultHandler, FakeRunner, provisioned } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN, TEST_IMAGE } from "../testing/test-server.ts";

// Property-based fuzzing of every API body: the RPCs, PUT/PATCH of each resource kind and the
// request proxy. One server for the file (the whole stack of main.ts, HTTP in-process through
// app.request(); a fake runner over a real WebSocket). Properties: no 5xx; every error is
// `{code, message, details?}` with a canonical code and its HTTP status; a rejected call changes
// nothing a client or the runner can see. fast-check prints the seed and the shrunk input of a
// failure; replay with `{ seed, path }` in fc.assert's options.

const RUNS = { proxy: 600, resources: 800, harness: 700, rpc: 1_500 };
const BODY_MAX_BYTES = 4_096;
const NAMESPACES = ["default", "team-a"] as const;
const DIGEST = TEST_IMAGE.split("@")[1] ?? "";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

let dataDir: string;
let store: Store;
let hub: RunnerHub;
let harness: RunningHarness;
let server: ComposedServer;
let upgrades: Server;
let app: Hono;
let runner: FakeRunner;
let lifecycle: Lifecycle;
/** What the server logged at level error (an unhandled error's text), shown when a case fails. */
const serverErrors: string[] = [];
const log: Logger = (level, msg, fields) => {
  if (level === "error" || level === "warn")
    serverErrors.push(`${msg} ${JSON.stringify(fields).slice(0, 500)}`);
};

function result(id: string): ResultRecord {
  const now = new Date().toISOString();
  return {
    id,
    outcome: "succeeded",
    output: `echo ${id}`,
    usage: { input_tokens: 3, output_tokens: 2 },
    started_at: now,
    finished_at: now,
  };
}

function chunk(relayId: string, data: string, done: boolean, status?: number): void {
  runner.send({
    version: RUNNER_PROTOCOL_VERSION,
    type: "relay_chunk",
    payload: { relay_id: relayId, data, done, ...(status !== undefined ? { status } : {}) },
  });
}

async function call(method: string, path: string, body?: string): Promise<{ status: number; text: string }> {
  const response = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body !== undefined && method !== "GET" ? { body } : {}),
  });
  return { status: response.status, text: await response.text() };
}

async function getJson(path: string): Promise<Json> {
  const reply = await call("GET", path);
  expect(reply.status).toBe(200);
  return JSON.parse(reply.text);
}

/**
 * Everything a client or the runner can see: GetAgentStatus of all sessions, the resource and
 * HarnessSession lists, the runner's commands. Read through the handlers the routes call (no HTTP:
 * two snapshots a case).
 */
async function snapshot(): Promise<Json> {
  const lists: Record<string, unknown> = {};
  for (const ns of NAMESPACES) {
    lists[`${ns}/agentruntimes`] = await store.listResources("AgentRuntime", ns);
    lists[`${ns}/agents`] = await store.listResources("Agent", ns);
    lists[`${ns}/harnesssessions`] = await harness.routes.sessions.list(ns);
  }
  return {
    sessions: await lifecycle.handlers.GetAgentStatus({}),
    lists,
    commands: runner.commands.length,
  };
}

/** A HarnessSession the controller has caught up with (nothing left to do until the next write). */
function quiet(session: Json): boolean {
  return (
    session.status.observedGeneration === session.metadata.generation &&
    !["Pending", "Draining"].includes(session.status.phase)
  );
}

let dirty = false;
/**
 * The snapshot once the background work of the last accepted call (the controller reconciling a
 * HarnessSession, a relay's accounting) is over: two equal snapshots in a row.
 */
async function settled(): Promise<Json> {
  let previous = await snapshot();
  if (!dirty) return previous;
  const deadline = Date.now() + 3_000;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    const next = await snapshot();
    const harnessQuiet = NAMESPACES.every((ns) =>
      (next.lists[`${ns}/harnesssessions`].items as Json[]).every(quiet),
    );
    if ((harnessQuiet && JSON.stringify(next) === JSON.stringify(previous)) || Date.now() > deadline) {
      dirty = false;
      return next;
    }
    previous = next;
  }
}

/** Placeholders a generator leaves for what only exists at run time (ids the server made). */
function resolve(text: string, state: Json, pick: number): string {
  const sessions = state.sessions.sessions as { session_id: string; container_name: string }[];
  const at = sessions.length ? sessions[pick % sessions.length] : undefined;
  return text
    .replaceAll('"@@session@@"', JSON.stringify(at?.session_id ?? "no-session"))
    .replaceAll('"@@container@@"', JSON.stringify(at?.container_name ?? "no-container"))
    .replace(/@@huge-(\d+)-(.*?)@@/gsu, (_m, n: string, unit: string) => unit.repeat(Number(n)))
    .replace(/"@@deep-(arr|obj)-(\d+)@@"/g, (_m, kind: string, n: string) => {
      const depth = Number(n);
      return kind === "arr"
        ? `${"[".repeat(depth)}${"]".repeat(depth)}`
        : `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
    });
}

/** No 5xx; an error is `{code, message, details?}` with its canonical status. */
function expectWellFormed(reply: { status: number; text: string }): void {
  expect(
    reply.status,
    `${reply.text.slice(0, 300)}; server log: ${serverErrors.slice(-3).join(" | ")}`,
  ).toBeLessThan(500);
  if (reply.status < 400) return;
  const body = JSON.parse(reply.text);
  const parsed = ApiErrorBody.strict().safeParse(body);
  expect(parsed.success, reply.text.slice(0, 500)).toBe(true);
  const code = body.code as keyof typeof httpStatusOf;
  // Body bounds are documented as 413 RESOURCE_EXHAUSTED: the proxy's (proxy/relay/request-relay.ts)
  // and every other JSON route's (hono/body-limit in proxy/http/app.ts).
  if (reply.status === 413) expect(code).toBe("RESOURCE_EXHAUSTED");
  else expect(reply.status, `${code}: ${body.message}`).toBe(httpStatusOf[code]);
}

type Case = { method: string; path: string; body: string | undefined; pick: number };
/** Replies by class (2xx, 4xx, …) per suite: each suite must have run both the accept and reject paths. */
const tally = new Map<string, Record<string, number>>();

/** One fuzz case: settle, call, check the reply; a rejected call must leave the snapshot as it was. */
async function exercise(suite: string, c: Case): Promise<void> {
  const before = await settled();
  const body = c.body === undefined ? undefined : resolve(c.body, before, c.pick);
  const reply = await call(c.method, c.path, body);
  const counts = tally.get(suite) ?? {};
  counts[`${String(reply.status)[0]}xx`] = (counts[`${String(reply.status)[0]}xx`] ?? 0) + 1;
  tally.set(suite, counts);
  expectWellFormed(reply);
  if (reply.status >= 400) expect(await snapshot()).toEqual(before);
  else dirty = true;
}

// --- generators -----------------------------------------------------------------------------

/** A placeholder, expanded just before sending, so a failure prints a short counterexample. */
const hugeString = fc
  .tuple(
    fc.constantFrom("x", "é", "😀", "\u0000", "\\", '"', "\u202e"),
    fc.integer({ min: 1_000, max: 200_000 }),
  )
  .map(([unit, n]) => `@@huge-${n}-${unit}@@`);
const weirdString = fc.oneof(
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.constantFrom("", " ", "__proto__", "constructor", "../../etc/passwd", "a\nb", "\ud800", "ＡＢＣ"),
);
const deep = fc
  .tuple(fc.constantFrom("arr", "obj"), fc.integer({ min: 50, max: 20_000 }))
  .map(([kind, n]) => `@@deep-${kind}-${n}@@`);
/** A value of the wrong type (or shape) for any field. */
const wrongValue = fc.oneof(
  { arbitrary: fc.anything({ maxDepth: 2, maxKeys: 3 }), weight: 4 },
  { arbitrary: weirdString, weight: 3 },
  { arbitrary: hugeString, weight: 1 },
  { arbitrary: deep, weight: 1 },
  { arbitrary: fc.constantFrom(null, true, 0, -1, 1e308, 2 ** 53, [], {}), weight: 2 },
);

/** A valid-shaped body with one thing broken: a key dropped, added or given a wrong value. */
function mutated(valid: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<unknown> {
  return valid.chain((object) => {
    const keys = Object.keys(object);
    const setKey = (key: string, value: unknown) => {
      const copy = { ...object };
      Object.defineProperty(copy, key, { value, enumerable: true, writable: true, configurable: true });
      return copy;
    };
    const options: fc.Arbitrary<unknown>[] = [
      fc
        .tuple(fc.oneof(weirdString, fc.constantFrom("extra", "status", "__proto__")), wrongValue)
        .map(([key, value]) => setKey(key, value)),
      wrongValue,
    ];
    if (keys.length) {
      options.push(
        fc.constantFrom(...keys).map((key) => {
          const copy = { ...object };
          delete copy[key];
          return copy;
        }),
        fc.tuple(fc.constantFrom(...keys), wrongValue).map(([key, value]) => setKey(key, value)),
      );
      // One level down: a nested object's field broken.
      const nested = keys.filter(
        (k) => object[k] && typeof object[k] === "object" && !Array.isArray(object[k]),
      );
      if (nested.length)
        options.push(
          fc
            .tuple(
              fc.constantFrom(...nested),
              fc.oneof(weirdString, fc.constantFrom("name", "spec")),
              wrongValue,
            )
            .map(([key, inner, value]) => setKey(key, { ...(object[key] as object), [inner]: value })),
        );
    }
    return fc.oneof(...options);
  });
}

/** Body text: valid JSON, mutated JSON, or no JSON at all. */
function bodyText(valid: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<string | undefined> {
  return fc.oneof(
    { arbitrary: valid.map((v) => JSON.stringify(v)), weight: 5 },
    { arbitrary: mutated(valid).map((v) => JSON.stringify(v) ?? ""), weight: 5 },
    {
      arbitrary: fc.constantFrom(
        undefined,
        "",
        " \n",
        "null",
        "[]",
        "{",
        "{}}",
        '{"a":1,}',
        "undefined",
        "NaN",
        "\u0000",
        "\ufeff{}",
        '"string"',
        "1e400",
      ),
      weight: 1,
    },
    { arbitrary: fc.string({ unit: "binary", maxLength: 200 }), weight: 1 },
    { arbitrary: fc.json({ maxDepth: 3 }), weight: 1 },
    { arbitrary: deep.map((d) => `"${d}"`), weight: 1 },
  );
}

const pick = fc.nat();
const dnsName = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?$/);
const id = fc.oneof(
  { arbitrary: fc.constant("@@session@@"), weight: 4 },
  { arbitrary: fc.stringMatching(/^[A-Za-z0-9._:-]{1,24}$/), weight: 2 },
  { arbitrary: weirdString, weight: 1 },
);
const container = fc.oneof(
  { arbitrary: fc.constant("@@container@@"), weight: 4 },
  { arbitrary: fc.string({ minLength: 1, maxLength: 40 }), weight: 1 },
  { arbitrary: fc.constantFrom("", "x".repeat(129)), weight: 1 },
);
const agentRef = fc.oneof(
  {
    arbitrary: fc.constantFrom("bob", "default/bob", "carol", "default/carol", "team-a/bob", "ghost"),
    weight: 4,
  },
  { arbitrary: dnsName, weight: 1 },
  { arbitrary: weirdString, weight: 1 },
);
const provision = fc.record(
  {
    agent_ref: agentRef,
    workstream: fc.constantFrom("", "w1", "w2", "UPPER"),
    client_request_id: fc.oneof(
      fc.constantFrom("", "k1", "k2"),
      fc.stringMatching(/^[A-Za-z0-9._:-]{1,16}$/),
    ),
  },
  { requiredKeys: ["agent_ref", "client_request_id"] },
);
const agentMessage = fc.oneof(
  fc.record({ type: fc.constant("message"), text: fc.string({ maxLength: 100 }) }),
  fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  hugeString.map((text) => ({ type: "message", text })),
);
const rpcBodies: Record<RpcMethod, fc.Arbitrary<Record<string, unknown>>> = {
  ProvisionAgentWorkspace: provision,
  SpawnAgent: provision,
  StartAgentSession: fc.record(
    { container_name: container, resume_session_id: id },
    { requiredKeys: ["container_name"] },
  ),
  StopAgentSession: fc.record({ session_id: id }),
  ReloadAgentSession: fc.record({ session_id: id }),
  GetAgentStatus: fc.record({ session_id: id }, { requiredKeys: [] }),
  RemoveAgentWorkspace: fc.record({ container_name: container }),
  SendAgentMessage: fc.record({ session_id: id, message: agentMessage }),
};
const rpcCase: fc.Arbitrary<Case> = fc.oneof(
  {
    arbitrary: fc.constantFrom(...RpcMethod.options).chain((m) =>
      fc.record({
        method: fc.constant("POST"),
        path: fc.constant(`/v1/rpc/${m}`),
        body: bodyText(rpcBodies[m]),
        pick,
      }),
    ),
    weight: 20,
  },
  {
    // Unknown methods, and a known method under the wrong verb.
    arbitrary: fc.record({
      method: fc.constantFrom("POST", "GET", "PUT"),
      path: fc
        .oneof(fc.constantFrom("DeleteEverything", "getagentstatus", "SpawnAgent"), weirdString)
        .map((m) => `/v1/rpc/${encodeURIComponent(m.toWellFormed())}`),
      body: fc.constant("{}"),
      pick,
    }),
    weight: 1,
  },
);

const namespace = fc.oneof(
  { arbitrary: fc.constantFrom(...NAMESPACES), weight: 8 },
  { arbitrary: fc.constantFrom("Bad_NS", "-x", "a".repeat(64)), weight: 1 },
);
const resourceName = fc.oneof(
  { arbitrary: fc.constantFrom("fz-a", "fz-b"), weight: 8 },
  { arbitrary: fc.constantFrom("NoGood", "x_y", "a".repeat(64)), weight: 1 },
);
/** metadata: absent, matching the path, or naming something else. */
const metadata = (ns: string, name: string) =>
  fc.oneof(
    fc.constant(undefined),
    fc.constant({ name, namespace: ns }),
    fc.constant({ name }),
    fc.record({ name: fc.constantFrom(name, "other"), namespace: fc.constantFrom(ns, "elsewhere") }),
    fc.constant({ name, creationTimestamp: "2020-01-01T00:00:00Z" }),
  );
const withMetadata = <T extends Record<string, unknown>>(body: T, meta: unknown): Record<string, unknown> =>
  meta === undefined ? body : { ...body, metadata: meta };

const image = fc.oneof(
  { arbitrary: fc.constant(TEST_IMAGE), weight: 4 },
  { arbitrary: fc.constantFrom("nginx:latest", "UPPER@sha256:abc", `x@sha256:${"A".repeat(64)}`), weight: 1 },
);
const runtimeSpec = fc.record(
  {
    image,
    contract: fc.constantFrom("v1alpha1", "v1alpha2", "v2"),
    capabilities: fc.subarray(["streaming", "telepathy"]),
    approved: fc.boolean(),
    command: fc.array(fc.string({ minLength: 1, maxLength: 20 }), { minLength: 1, maxLength: 3 }),
  },
  { requiredKeys: ["image", "contract"] },
);
const credential = fc.oneof(
  fc.record({
    name: fc.constantFrom("OPENAI_API_KEY", "KEY_2", "bad-name"),
    value: fc.string({ maxLength: 20 }),
  }),
  fc.record({
    name: fc.constantFrom("OPENAI_API_KEY", "KEY_2"),
    secretRef: fc.record({ env: fc.constantFrom("HOME_KEY", "lower") }),
  }),
);
const agentSpec = fc.record(
  {
    runtimeRef: fc.constantFrom("reference", "fz-a", "ghost", "Bad"),
    credentials: fc.array(credential, { maxLength: 3 }),
    model: fc.record({
      baseUrl: fc.constantFrom(
        "http://10.0.0.1:11434/v1",
        "https://models.example/v1",
        "ftp://x",
        "not a url",
      ),
      name: fc.string({ maxLength: 20 }),
    }),
    egress: fc.array(
      fc.record({
        cidr: fc.constantFrom("10.0.0.1/32", "10.0.0.0/8", "300.1.1.1", "x"),
        port: fc.integer({ min: -1, max: 70_000 }),
      }),
      { maxLength: 3 },
    ),
  },
  { requiredKeys: ["runtimeRef"] },
);
const resourceCase: fc.Arbitrary<Case> = fc
  .tuple(
    fc.constantFrom("agentruntimes", "agents"),
    namespace,
    resourceName,
    fc.oneof({ arbitrary: fc.constant("PUT"), weight: 9 }, { arbitrary: fc.constant("PATCH"), weight: 1 }),
  )
  .chain(([plural, ns, name, method]) =>
    fc.record({
      method: fc.constant(method),
      path: fc.constant(`/v1/namespaces/${ns}/${plural}/${name}`),
      body: bodyText(
        fc
          .tuple(plural === "agents" ? agentSpec : runtimeSpec, metadata(ns, name))
          .map(([spec, meta]) =>
            withMetadata(
              { apiVersion: API_VERSION, kind: plural === "agents" ? "Agent" : "AgentRuntime", spec },
              meta,
            ),
          ),
      ),
      pick,
    }),
  );

const harnessSpec = fc.record(
  {
    agentRef: fc.constantFrom("alice", "fz-a", "ghost"),
    runtimeRef: fc.constantFrom("reference", "fz-a"),
    desiredState: fc.constantFrom("running", "stopped", "paused"),
    idleTimeout: fc.constantFrom("0", "15m", "1h30m", "720h", "721h", "15x", "", "-1s"),
  },
  { requiredKeys: ["agentRef", "runtimeRef"] },
);
const harnessCase: fc.Arbitrary<Case> = fc
  .tuple(
    namespace,
    fc.oneof(
      { arbitrary: fc.constantFrom("fz-a", "fz-b", "fz-c"), weight: 8 },
      { arbitrary: fc.constantFrom("NoGood", "chat_"), weight: 1 },
    ),
    fc.constantFrom("PUT", "PATCH"),
  )
  .chain(([ns, name, method]) =>
    fc.record({
      method: fc.constant(method),
      path: fc.constant(`/v1/namespaces/${ns}/harnesssessions/${name}`),
      body: bodyText(
        method === "PUT"
          ? fc
              .tuple(
                harnessSpec,
                metadata(ns, name),
                fc.option(fc.anything({ maxDepth: 2 }), { nil: undefined }),
              )
              .map(([spec, meta, status]) =>
                withMetadata(
                  {
                    apiVersion: API_VERSION,
                    kind: "HarnessSession",
                    spec,
                    ...(status !== undefined ? { status } : {}),
                  },
                  meta,
                ),
              )
          : // A JSON merge patch: set, or remove with null.
            fc.record(
              {
                spec: fc.record(
                  {
                    desiredState: fc.option(fc.constantFrom("running", "stopped", "paused")),
                    idleTimeout: fc.option(fc.constantFrom("0", "30s", "bogus")),
                    agentRef: fc.constantFrom("alice", "other"),
                  },
                  { requiredKeys: [] },
                ),
                metadata: fc.record({ name: fc.constantFrom(name, "renamed") }),
                status: fc.anything({ maxDepth: 2 }),
                apiVersion: fc.option(fc.constantFrom(API_VERSION, "v0")),
              },
              { requiredKeys: [] },
            ),
      ),
      pick,
    }),
  );

const requestId = fc.oneof(
  { arbitrary: fc.constantFrom("dup-1", "dup-2"), weight: 1 },
  { arbitrary: fc.stringMatching(/^[A-Za-z0-9._-]{8,32}$/), weight: 8 },
  { arbitrary: fc.constantFrom("has space", "", "x".repeat(129)), weight: 1 },
);
const proxyBody = fc.record(
  {
    input: fc.oneof(
      { arbitrary: fc.string({ minLength: 1, maxLength: 100 }), weight: 6 },
      { arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: 100 }), weight: 2 },
      // Past the proxy's body bound: 413.
      {
        arbitrary: fc.integer({ min: BODY_MAX_BYTES, max: 3 * BODY_MAX_BYTES }).map((n) => "x".repeat(n)),
        weight: 1,
      },
    ),
    stream: fc.boolean(),
    id: requestId,
  },
  { requiredKeys: ["input"] },
);
const proxyCase: fc.Arbitrary<Case> = fc.record({
  method: fc.constant("POST"),
  path: fc
    .oneof(
      { arbitrary: fc.constant("chat"), weight: 10 },
      { arbitrary: fc.constantFrom("nosuch", "fz-a", "Bad_Name"), weight: 1 },
    )
    .map((name) => `/v1/namespaces/default/harnesssessions/${name}/requests`),
  body: bodyText(proxyBody),
  pick,
});

// --- the server -----------------------------------------------------------------------------

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "agent-sessions-fuzz-"));
  // The server as main.ts builds it (the composition root), without its listener.
  server = await composeServer(
    {
      ...defaultSettings(),
      port: 0,
      host: "127.0.0.1",
      dataDir,
      adminToken: ADMIN_TOKEN,
      runnerToken: RUNNER_TOKEN,
      // Heartbeats far apart: a busy test machine must not lose the link under the load.
      heartbeatMs: 10_000,
      reattachWindowMs: 60_000,
      frameBufferSize: 1_000,
      commandTimeoutMs: 5_000,
      shippedImages: { reference: TEST_IMAGE },
      requestTimeoutMs: 5_000,
      requestBodyMaxBytes: BODY_MAX_BYTES,
      idleCheckMs: 60_000,
      // The operator allows the test bed's model server, which the Agents below name.
      egressAllow: [{ cidr: "10.213.0.1/32", ports: { first: 11434, last: 11434 } }],
    },
    { log },
  );
  ({ store, hub, lifecycle, harness, app } = server);
  // HTTP goes through app.request(); the socket is only for the runner's WebSocket.
  upgrades = createServer((_req, res) => res.writeHead(404).end());
  upgrades.on("upgrade", (request, socket, head) => hub.handleUpgrade(request, socket, head));
  await new Promise<void>((done) => upgrades.listen(0, "127.0.0.1", done));
  const { port } = upgrades.address() as AddressInfo;
  runner = await FakeRunner.connect(`ws://127.0.0.1:${port}${RUNNER_CONNECT_PATH}`, RUNNER_TOKEN, {
    handler: (command) => {
      switch (command.kind) {
        case "provision":
          return provisioned(command, DIGEST);
        case "relay": {
          const reply = result(command.request.id);
          if (command.request.stream) {
            chunk(command.relay_id, 'data: {"type":"delta","text":"one "}\n\n', false, 200);
            chunk(command.relay_id, `data: ${JSON.stringify({ type: "result", result: reply })}\n\n`, false);
          } else chunk(command.relay_id, JSON.stringify(reply), false, 200);
          chunk(command.relay_id, "", true);
          return { ok: true, result: { status: 200 } };
        }
        default:
          return defaultHandler(command);
      }
    },
  });

  const agent = (name: string) => ({
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name },
    spec: {
      runtimeRef: "reference",
      credentials: [{ name: "OPENAI_API_KEY", value: "sk-test" }],
      model: { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" },
      egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
    },
  });
  for (const name of ["alice", "bob", "carol"])
    expect(
      (await call("PUT", `/v1/namespaces/default/agents/${name}`, JSON.stringify(agent(name)))).status,
    ).toBe(201);
  const chat = {
    apiVersion: API_VERSION,
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference" },
  };
  expect(
    (await call("PUT", "/v1/namespaces/default/harnesssessions/chat", JSON.stringify(chat))).status,
  ).toBe(201);
  const deadline = Date.now() + 10_000;
  while ((await getJson("/v1/namespaces/default/harnesssessions/chat")).status.phase !== "Ready") {
    if (Date.now() > deadline) throw new Error("HarnessSession chat never became Ready");
    await new Promise((r) => setTimeout(r, 10));
  }
  dirty = true;
}, 30_000);

afterAll(async () => {
  runner?.kill();
  await server?.close(() => new Promise<void>((done) => (upgrades ? upgrades.close(() => done()) : done())));
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** Run one suite's property, then check it went both ways and the runner link held. */
async function fuzz(suite: string, cases: fc.Arbitrary<Case>, numRuns: number): Promise<void> {
  await fc.assert(
    fc.asyncProperty(cases, (c) => exercise(suite, c)),
    { numRuns },
  );
  const counts = tally.get(suite) ?? {};
  expect(counts["2xx"], JSON.stringify(counts)).toBeGreaterThan(numRuns / 50);
  expect(counts["4xx"], JSON.stringify(counts)).toBeGreaterThan(numRuns / 4);
  expect(runner.ws.readyState, serverErrors.slice(-3).join(" | ")).toBe(runner.ws.OPEN);
}

// Ordered: the proxy first (it needs `chat` Ready), the RPCs last (they may stop or remove anything).
describe("API bodies under property-based fuzzing: no 5xx, canonical errors, rejected calls change nothing", () => {
  it(`the request proxy body, POST …/harnesssessions/{name}/requests (${RUNS.proxy} cases)`, async () => {
    await fuzz("proxy", proxyCase, RUNS.proxy);
  }, 120_000);

  it(`PUT and PATCH of agentruntimes and agents (${RUNS.resources} cases)`, async () => {
    await fuzz("resources", resourceCase, RUNS.resources);
  }, 120_000);

  it(`PUT and PATCH of harnesssessions (${RUNS.harness} cases)`, async () => {
    await fuzz("harnesssessions", harnessCase, RUNS.harness);
  }, 120_000);

  it(`every RPC at POST /v1/rpc/{Method} (${RUNS.rpc} cases)`, async () => {
    await fuzz("rpc", rpcCase, RUNS.rpc);
  }, 120_000);

  it("refuses a body nested deeper than MAX_JSON_DEPTH with 400 before recursive code sees it", async () => {
    const deepObject = `${'{"a":'.repeat(5_000)}1${"}".repeat(5_000)}`;
    const cases: [string, string, string][] = [
      // A merge patch and SendAgentMessage's size check once overflowed the stack here (500).
      ["PATCH", "/v1/namespaces/default/harnesssessions/chat", deepObject],
      ["POST", "/v1/rpc/SendAgentMessage", `{"session_id":"s","message":{"a":${deepObject}}}`],
      ["PUT", "/v1/namespaces/default/agents/fz-a", deepObject],
      // The request relay reads its own bodies (bounded while read): the same guard applies.
      // Its body limit is small: 100 levels deep fit in it.
      [
        "POST",
        "/v1/namespaces/default/harnesssessions/chat/requests",
        `{"input":"x","metadata":${'{"a":'.repeat(100)}1${"}".repeat(100)}}`,
      ],
    ];
    for (const [method, path, body] of cases) {
      const reply = await call(method, path, body);
      expect(reply.status).toBe(400);
      expect(JSON.parse(reply.text)).toEqual({
        code: "INVALID_ARGUMENT",
        message: `the request body is nested deeper than ${MAX_JSON_DEPTH} levels`,
      });
    }
    const atLimit = `${'{"a":'.repeat(MAX_JSON_DEPTH - 2)}1${"}".repeat(MAX_JSON_DEPTH - 2)}`;
    const reply = await call("POST", "/v1/rpc/SendAgentMessage", `{"session_id":"s","message":${atLimit}}`);
    expect(JSON.parse(reply.text)).toMatchObject({ code: "NOT_FOUND" });
  });
});
