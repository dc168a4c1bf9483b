/**
 * What the runner's model gateway (runner/gateway/, issue 35) costs: first-token latency of a
 * streamed chat completion through the gateway beside the same call made directly to the model
 * server, in the same run; and the gateway's memory with 100 and 1,000 live routes (sessions).
 * Issue 35's targets: first token ≤ direct + 2 ms p50; ≤ 5 MiB per 100 live sessions.
 *
 *   node test/bench/gateway-bench.ts [--requests 200] [--warmup 20]   (no test bed needed)
 *
 * Three processes, as in a real install: the loopback model server (test/fixtures/model-server.ts,
 * its "[fast]" mode: no pause between streamed words, so the model is not what is measured), the
 * gateway (its own process, like the runner it lives in) and this client. The client makes
 * `requests` sequential streamed calls on each path, the two paths taking turns call by call, so
 * the machine's other load falls on both alike; first token = from sending the request to the first
 * content delta read; whole = to the reply's end. Memory: the gateway process's RSS and V8 heap
 * (after a forced GC) with its one benchmark route, then after 100 and after 1,000 routes, each of
 * a different Agent with budgets and each having made one call (so every route's budget state
 * exists too).
 */
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Agent, request } from "undici";
import { type Gateway, startGateway } from "../../runner/gateway/gateway.ts";
import { GatewayRoutes } from "../../runner/gateway/routes.ts";
import { startModelServer } from "../fixtures/model-server.ts";
import { percentile } from "./stats.ts";

const { values: args } = parseArgs({
  options: {
    requests: { type: "string", default: "200" },
    warmup: { type: "string", default: "20" },
    role: { type: "string" },
    upstream: { type: "string" },
  },
});
const REAL_KEY = "sk-bench-real-key";
const BODY = JSON.stringify({
  model: "bench-model",
  stream: true,
  messages: [{ role: "user", content: "[fast] say something short please" }],
});

type Memory = { rss: number; heapUsed: number; routes: number };
type Message =
  | { type: "ready"; url: string }
  | { type: "token"; token: string }
  | { type: "memory"; memory: Memory }
  | { type: "routes-added"; tokens: string[] };

/** The gateway's process: answers the bench's questions over IPC. */
async function gatewayProcess(upstream: string): Promise<void> {
  const routes = new GatewayRoutes();
  const gateway: Gateway = await startGateway({
    host: "127.0.0.1",
    port: 0,
    routes,
    events: {
      onUsage: () => {},
      onRefused: () => {},
    },
  });
  const bench = routes.ensure("bench", { agent: "default/bench", upstream }, { OPENAI_API_KEY: REAL_KEY });
  process.on("message", (message: { type: string; count?: number }) => {
    if (message.type === "memory") {
      globalThis.gc?.();
      const { rss, heapUsed } = process.memoryUsage();
      process.send?.({
        type: "memory",
        memory: { rss, heapUsed, routes: routes.keys().length },
      } satisfies Message);
    } else if (message.type === "add-routes") {
      const start = routes.keys().length;
      const tokens: string[] = [];
      for (let i = start; i < start + (message.count ?? 0); i++) {
        const grant = {
          agent: `default/agent-${i}`,
          upstream,
          limits: { tokensPerDay: 1e9, requestsPerMinute: 600 },
        };
        tokens.push(
          routes.ensure(`session-${i}`, grant, { OPENAI_API_KEY: `${REAL_KEY}-${i}` }).tokens.OPENAI_API_KEY!,
        );
      }
      process.send?.({ type: "routes-added", tokens } satisfies Message);
    } else if (message.type === "exit") {
      void gateway.close().then(() => process.exit(0));
    }
  });
  process.send?.({ type: "ready", url: gateway.baseUrlFor(upstream) } satisfies Message);
  process.send?.({ type: "token", token: bench.tokens.OPENAI_API_KEY! } satisfies Message);
}

function start(role: string, extra: string[] = []): { child: ChildProcess; next: () => Promise<Message> } {
  const child = fork(fileURLToPath(import.meta.url), ["--role", role, ...extra], {
    execArgv: ["--expose-gc"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const queue: Message[] = [];
  const waiting: ((m: Message) => void)[] = [];
  child.on("message", (m: Message) => {
    const w = waiting.shift();
    if (w) w(m);
    else queue.push(m);
  });
  const next = () => {
    const m = queue.shift();
    return m ? Promise.resolve(m) : new Promise<Message>((r) => waiting.push(r));
  };
  return { child, next };
}

async function expect<T extends Message["type"]>(
  next: () => Promise<Message>,
  type: T,
): Promise<Extract<Message, { type: T }>> {
  const m = await next();
  if (m.type !== type) throw new Error(`expected ${type} from a child, got ${m.type}`);
  return m as Extract<Message, { type: T }>;
}

/** Nearest-rank percentile. */

const dispatcher = new Agent({ keepAliveTimeout: 30_000 });

/** One streamed call: ms to the first content delta and to the end. */
async function streamed(url: string, key: string): Promise<{ first: number; whole: number }> {
  const started = performance.now();
  const res = await request(url, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: BODY,
    dispatcher,
  });
  if (res.statusCode !== 200) throw new Error(`${url}: HTTP ${res.statusCode} ${await res.body.text()}`);
  let first = Number.NaN;
  for await (const piece of res.body) {
    if (Number.isNaN(first) && String(piece).includes('"content"')) first = performance.now() - started;
  }
  return { first, whole: performance.now() - started };
}

async function main(): Promise<void> {
  const requests = Number(args.requests);
  const warmup = Number(args.warmup);
  if (!Number.isInteger(requests) || requests < 1)
    throw new Error(`--requests: a positive integer, got ${args.requests}`);
  const model = start("model");
  const upstream = (await expect(model.next, "ready")).url;
  const gw = start("gateway", ["--upstream", upstream]);
  const gatewayUrl = (await expect(gw.next, "ready")).url;
  const token = (await expect(gw.next, "token")).token;
  const memory = async (): Promise<Memory> => {
    gw.child.send({ type: "memory" });
    return (await expect(gw.next, "memory")).memory;
  };
  try {
    const paths = [
      { name: "direct", url: `${upstream}/chat/completions`, key: REAL_KEY },
      { name: "gateway", url: `${gatewayUrl}/chat/completions`, key: token },
    ];
    for (let i = 0; i < warmup; i++) for (const path of paths) await streamed(path.url, path.key);
    const results = new Map(paths.map((p) => [p.name, { first: [] as number[], whole: [] as number[] }]));
    for (let i = 0; i < requests; i++) {
      // Taking turns, the first path alternating, so neither always follows the other.
      for (const path of i % 2 === 0 ? paths : [...paths].reverse()) {
        const r = await streamed(path.url, path.key);
        results.get(path.name)?.first.push(r.first);
        results.get(path.name)?.whole.push(r.whole);
      }
    }
    const fmt = (ms: number) => ms.toFixed(2).padStart(8);
    console.log(
      `\nstreamed chat completion, ${requests} sequential calls per path (after ${warmup} warm-up each)\n`,
    );
    console.log("path     | first token p50 | p95      | whole p50 | p95");
    console.log("---------|-----------------|----------|-----------|---------");
    for (const [name, r] of results)
      console.log(
        `${name.padEnd(8)} | ${fmt(percentile(r.first, 50))} ms     | ${fmt(percentile(r.first, 95))} | ${fmt(percentile(r.whole, 50))}  | ${fmt(percentile(r.whole, 95))}`,
      );
    const direct = results.get("direct")!;
    const through = results.get("gateway")!;
    console.log(
      `\ngateway - direct, first token: p50 +${(percentile(through.first, 50) - percentile(direct.first, 50)).toFixed(2)} ms, ` +
        `p95 +${(percentile(through.first, 95) - percentile(direct.first, 95)).toFixed(2)} ms (target: p50 ≤ +2 ms)`,
    );

    // Memory, after the latency runs (the pools and the benchmark route warm).
    const rows: Memory[] = [await memory()];
    for (const add of [100, 900]) {
      gw.child.send({ type: "add-routes", count: add });
      const tokens = (await expect(gw.next, "routes-added")).tokens;
      for (const t of tokens) await streamed(`${gatewayUrl}/chat/completions`, t);
      rows.push(await memory());
    }
    const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).padStart(6);
    const base = rows[0]!;
    console.log(
      "\ngateway process memory (after a forced GC; each route a different Agent with budgets, one call made)\n",
    );
    console.log("routes | RSS MiB | heap MiB | RSS + per 100 routes | heap + per 100 routes");
    console.log("-------|---------|----------|----------------------|----------------------");
    for (const row of rows) {
      const added = row.routes - base.routes;
      const per = (delta: number) => (added === 0 ? "     -" : mib((delta / added) * 100));
      console.log(
        `${String(row.routes).padStart(6)} | ${mib(row.rss)}  | ${mib(row.heapUsed)}   | ${per(row.rss - base.rss)} MiB           | ${per(row.heapUsed - base.heapUsed)} MiB`,
      );
    }
    console.log("(target: ≤ 5 MiB per 100 live sessions)");
  } finally {
    gw.child.send({ type: "exit" });
    model.child.kill();
    await dispatcher.close();
  }
}

if (args.role === "model") {
  const model = await startModelServer("127.0.0.1");
  process.send?.({ type: "ready", url: model.url } satisfies Message);
} else if (args.role === "gateway") {
  await gatewayProcess(args.upstream ?? "");
} else {
  await main();
}
