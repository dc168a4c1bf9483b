/**
 * The server's CPU per relayed request, without Docker: a real server (proxy/main.ts, its JSON log
 * lines written to stderr as `serve` writes them, the audit and metrics on) in this process, a
 * fake runner in a second process answering each `relay` with one result record, and the load
 * from a third (closed loop, undici, the admin token). What is measured is this process's CPU
 * (process.cpuUsage) over the load, per request: the server's own path (routing, middlewares,
 * body, store reads, admission, settlement, the RequestFinished event, audit and access log
 * lines, the runner link's WebSocket), not the runner's relay to an adapter.
 *
 *   node test/bench/relay-server-cpu.ts [--requests 4000] [--concurrency 50] [--rounds 3]
 *                                       [--profile /tmp/server.cpuprofile]
 *
 * `--profile`: a CPU profile of the server over the last round (node:inspector), for a look at
 * where it goes. Run it with stderr sent away (`2>/dev/null`): the log lines are part of the
 * cost, not of the output. A baseline is the same command in another checkout, alternately.
 */
import { type ChildProcess, fork } from "node:child_process";
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { parseArgs } from "node:util";
import { Agent as Dispatcher, request } from "undici";

const { values: args } = parseArgs({
  options: {
    role: { type: "string", default: "server" },
    url: { type: "string" },
    requests: { type: "string", default: "4000" },
    concurrency: { type: "string", default: "50" },
    rounds: { type: "string", default: "3" },
    profile: { type: "string" },
  },
});

const BASE = "/v1/namespaces/default/harnesssessions";

if (args.role === "runner") await runner(args.url ?? "");
else if (args.role === "client")
  await client(args.url ?? "", Number(args.requests), Number(args.concurrency));
else await server();

/** The fake runner: provisions, probes and answers every relay with one succeeded result record. */
async function runner(url: string): Promise<void> {
  const { FakeRunner, defaultHandler } = await import("../../proxy/testing/fake-runner.ts");
  const { RUNNER_TOKEN } = await import("../../proxy/testing/test-server.ts");
  let fake: Awaited<ReturnType<typeof FakeRunner.connect>> | undefined;
  fake = await FakeRunner.connect(url, RUNNER_TOKEN, {
    handler: (command) => {
      switch (command.kind) {
        case "provision":
          return { ok: true, result: { container_name: command.container_name, endpoint: "10.0.0.9:8080" } };
        case "probe":
          return { ok: true, result: { endpoint: "10.0.0.9:8080" } };
        case "relay": {
          const now = new Date().toISOString();
          const result = {
            id: command.request.id,
            outcome: "succeeded",
            output: `echo ${command.request.input}`,
            usage: { input_tokens: 3, output_tokens: 5 },
            started_at: now,
            finished_at: now,
          };
          // As the real runner sends a one-piece reply: one chunk, done.
          fake?.ws.send(
            JSON.stringify({
              version: 1,
              type: "relay_chunk",
              payload: { relay_id: command.relay_id, data: JSON.stringify(result), done: true, status: 200 },
            }),
          );
          // The received and commands logs of the fake would grow without end.
          fake?.commands.splice(0);
          fake?.received.splice(0);
          return { ok: true, result: { status: 200 } };
        }
        default:
          return defaultHandler(command);
      }
    },
  });
  process.send?.("attached");
}

/** `total` requests by `concurrency` closed-loop clients; prints the count of failures. */
async function client(url: string, total: number, concurrency: number): Promise<void> {
  const dispatcher = new Dispatcher({ connections: 512 });
  const { ADMIN_TOKEN } = await import("../../proxy/testing/test-server.ts");
  let next = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next += 1;
        const res = await request(`${url}${BASE}/chat/requests`, {
          method: "POST",
          dispatcher,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({ input: `bench ${next}`, stream: false }),
        });
        const text = await res.body.text();
        if (res.statusCode !== 200 || !text.includes('"succeeded"')) failed += 1;
      }
    }),
  );
  await dispatcher.close();
  process.send?.({ failed });
}

function child(role: string, url: string, extra: string[] = []): ChildProcess {
  return fork(new URL(import.meta.url).pathname, ["--role", role, "--url", url, ...extra], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
}

function message(p: ChildProcess): Promise<unknown> {
  return new Promise((resolve, reject) => {
    p.once("message", resolve);
    p.once("exit", (code) => reject(new Error(`child exited ${code}`)));
  });
}

async function server(): Promise<void> {
  const { startTestServer } = await import("../../proxy/testing/test-server.ts");
  const { jsonLogger } = await import("../../contracts/log.ts");
  const t = await startTestServer({}, { log: jsonLogger("server") });
  const fake = child("runner", t.server.runnerUrl);
  await message(fake);
  const put = await t.call("PUT", `${BASE}/chat`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference", idleTimeout: "1h" },
  });
  if (put.status !== 201) throw new Error(`PUT: ${put.status} ${JSON.stringify(put.body)}`);
  for (let i = 0; ; i += 1) {
    const s = await t.call("GET", `${BASE}/chat`);
    if (s.body.status?.phase === "Ready") break;
    if (i > 200) throw new Error(`not Ready: ${JSON.stringify(s.body.status)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const rounds = Number(args.rounds);
  const perRequest: number[] = [];
  for (let round = 0; round <= rounds; round += 1) {
    // Round 0 warms up (JIT, statement cache).
    const profiling = args.profile !== undefined && round === rounds;
    const session = profiling ? new Session() : undefined;
    if (session) {
      session.connect();
      await session.post("Profiler.enable");
      await session.post("Profiler.start");
    }
    const before = process.cpuUsage();
    const t0 = performance.now();
    const load = child("client", t.server.url, [
      "--requests",
      args.requests,
      "--concurrency",
      args.concurrency,
    ]);
    const { failed } = (await message(load)) as { failed: number };
    const seconds = (performance.now() - t0) / 1000;
    const used = process.cpuUsage(before);
    if (session) {
      const { profile } = await session.post("Profiler.stop");
      writeFileSync(args.profile as string, JSON.stringify(profile));
      session.disconnect();
    }
    const ms = (used.user + used.system) / 1000 / Number(args.requests);
    if (round > 0) perRequest.push(ms);
    console.log(
      `round ${round}${round === 0 ? " (warm-up)" : ""}: ${args.requests} requests at ${args.concurrency}, ${failed} failed, ${(Number(args.requests) / seconds).toFixed(0)} req/s, server CPU ${ms.toFixed(3)} ms/request (user ${(used.user / 1000 / Number(args.requests)).toFixed(3)}, system ${(used.system / 1000 / Number(args.requests)).toFixed(3)})`,
    );
  }
  perRequest.sort((a, b) => a - b);
  console.log(
    `server CPU ms/request, median of ${rounds}: ${perRequest[Math.floor(rounds / 2)]?.toFixed(3)}`,
  );
  fake.kill();
  await t.close();
  process.exit(0);
}
