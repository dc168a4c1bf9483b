/**
 * `serve`'s embedded runner link: the real RunnerLink (runner/link/link.ts) dialing the real server
 * (proxy/main.ts) in process, no socket: in memory (contracts/runner-channel.ts) and over a
 * MessagePort (contracts/runner-port-channel.ts, what a runner on a worker thread gets; both ends
 * here on one thread). The protocol is the WebSocket's (proxy/PROTOCOL.md): its sections are cited
 * in the titles.
 */
import { setImmediate as nextTurn } from "node:timers/promises";
import { MessageChannel } from "node:worker_threads";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import type { InProcessDial, LinkChannel } from "../../contracts/runner-channel.ts";
import { portChannel } from "../../contracts/runner-port-channel.ts";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import {
  ADMIN_TOKEN,
  RUNNER_TOKEN,
  startTestServer,
  type TestServer,
} from "../../proxy/testing/test-server.ts";
import { RunnerLink } from "../../runner/link/link.ts";
import { until } from "../support/until.ts";

/** Until `holds` is true. */
const waitFor = (what: string, holds: () => boolean | Promise<boolean>) =>
  until(what, async () => ((await holds()) ? true : undefined), 5_000);

let t: TestServer | undefined;
const links: RunnerLink[] = [];
afterEach(async () => {
  for (const link of links.splice(0)) link.close();
  await t?.close();
  t = undefined;
});

/** How the embedded runner dials in the tests running now. */
let via: "memory" | "port" = "memory";

/** The server's dial, in memory or, as bin/embedded-runner/ does across threads, over a port pair. */
function dialOf(server: TestServer): InProcessDial {
  if (via === "memory") return server.server.dialRunner;
  return async (bearer) => {
    const { port1, port2 } = new MessageChannel();
    const admitted = await server.server.admitRunnerChannel(bearer, portChannel(port2));
    if (!admitted.ok) {
      port1.close();
      return admitted;
    }
    return { ok: true, channel: portChannel(port1) };
  };
}

type Embedded = { link: RunnerLink; commands: RunnerCommand[]; logs: string[] };

/**
 * An embedded runner's link as `serve` builds it: its credential issued in process, `dial` to the
 * hub. Its server URL leads nowhere: nothing may go through a socket.
 */
function embedded(
  server: TestServer,
  token: string,
  sessions: () => { session_id: string; container_name: string; state: "READY" }[] = () => [],
): Embedded {
  const commands: RunnerCommand[] = [];
  const logs: string[] = [];
  const link = new RunnerLink(
    {
      serverUrl: "http://127.0.0.1:9",
      token,
      name: "embedded",
      engine: "docker",
      capacity: 10,
      labels: {},
      backoffBaseMs: 20,
      backoffMaxMs: 100,
      dial: dialOf(server),
    },
    {
      sessions,
      command: async (command) => {
        commands.push(command);
        switch (command.kind) {
          case "provision":
            return { container_name: command.container_name, endpoint: "10.213.0.9:8080" };
          case "start":
            return { state: "READY" };
          default:
            return {};
        }
      },
      log: (level, msg, fields) => logs.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`),
    },
  );
  links.push(link);
  link.start();
  return { link, commands, logs };
}

async function runnerConnected(server: TestServer): Promise<boolean> {
  const reply = await server.call("GET", "/v1/runners/embedded");
  return reply.status === 200 && reply.body.connected === true;
}

async function stateOf(server: TestServer, sessionId: string): Promise<string | undefined> {
  const reply = await server.rpc("GetAgentStatus", { session_id: sessionId });
  return (reply.body.sessions as { state: string }[] | undefined)?.[0]?.state;
}

/** Provision and start one session through the API (the embedded runner answers both). */
async function liveSession(server: TestServer): Promise<{ container: string; sessionId: string }> {
  const provisioned = await server.rpc("ProvisionAgentWorkspace", {
    agent_ref: "alice",
    client_request_id: "r1",
  });
  expect(provisioned.status).toBe(200);
  const container = provisioned.body.container_name as string;
  const started = await server.rpc("StartAgentSession", { container_name: container });
  expect(started.status).toBe(200);
  return { container, sessionId: started.body.session_id as string };
}

/** The raw channel an embedded runner gets, for messages RunnerLink would never send. */
async function rawChannel(server: TestServer, bearer: string): Promise<LinkChannel> {
  const dialed = await dialOf(server)(bearer);
  if (!dialed.ok) throw new Error(`refused: ${dialed.status}`);
  return dialed.channel;
}

function closeOf(channel: LinkChannel): Promise<number> {
  return new Promise((resolve) => channel.onClose((code) => resolve(code)));
}

describe.each([
  ["in memory", "memory"],
  ["over a MessagePort", "port"],
] as const)("the embedded runner's in-process link, %s", (_, kind) => {
  beforeAll(() => {
    via = kind;
  });

  it("§2 attaches with its in-process issued credential, no socket: the server lists it connected", async () => {
    t = await startTestServer();
    const { link } = embedded(t, await t.server.issueRunnerCredential("embedded"));
    await waitFor("the link attached", () => link.attached);
    expect(link.runnerId).toMatch(/^runner-/);
    expect(await runnerConnected(t)).toBe(true);
  });

  it("§7 §8 carries commands down, results and frames up", async () => {
    t = await startTestServer();
    const { link, commands } = embedded(t, await t.server.issueRunnerCredential("embedded"));
    await waitFor("the link attached", () => link.attached);
    const { container, sessionId } = await liveSession(t);
    expect(commands.map((c) => c.kind)).toEqual(["provision", "start"]);
    expect(commands[0]).toMatchObject({ kind: "provision", container_name: container });
    expect(await stateOf(t, sessionId)).toBe("READY");

    const events = await t.events(`?session_id=${sessionId}`);
    link.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "frame",
      payload: {
        session_id: sessionId,
        frame: { protocol: "compass.v1", type: "log", payload: { text: "hi" } },
      },
    });
    await events.until((all) => all.some((e) => e.data.includes('"text":"hi"')));
  });

  it("§1 validates on both sides: the runner refuses to send an invalid message, the hub closes a link whose first message is invalid (1008) or not hello (4002)", async () => {
    t = await startTestServer();
    const credential = await t.server.issueRunnerCredential("embedded");
    const { link } = embedded(t, credential);
    await waitFor("the link attached", () => link.attached);
    expect(() => link.send({ version: 1, type: "frame", payload: { session_id: 7 } } as never)).toThrow();
    expect(link.backlog).toBe(0);

    const garbled = await rawChannel(t, credential);
    const garbledClosed = closeOf(garbled);
    garbled.send("{not json");
    expect(await garbledClosed).toBe(1008);

    const rude = await rawChannel(t, credential);
    const rudeClosed = closeOf(rude);
    rude.send(JSON.stringify({ version: 1, type: "pong", payload: { at: 1 } }));
    expect(await rudeClosed).toBe(4002);
    // The embedded runner's own link was never touched.
    expect(link.attached).toBe(true);
  });

  it("§1 refuses a bearer as the WebSocket upgrade would: unknown 401, the admin token 403", async () => {
    t = await startTestServer();
    expect(await dialOf(t)("asr_not-a-credential-of-this-server-00000")).toMatchObject({
      ok: false,
      status: 401,
      error: { code: "UNAUTHENTICATED" },
    });
    expect(await dialOf(t)(ADMIN_TOKEN)).toMatchObject({ ok: false, status: 403 });
    // The registration token registers a new name, as on the WebSocket.
    const { link } = embedded(t, RUNNER_TOKEN);
    await waitFor("the link attached", () => link.attached);
  });

  it("§5 §6 a link the server closes: the runner sees it lost and redials; the server marks its sessions DISCONNECTED, READY again on reattach", async () => {
    t = await startTestServer({ reattachWindowMs: 30_000 });
    const first = embedded(t, await t.server.issueRunnerCredential("embedded"));
    await waitFor("the link attached", () => first.link.attached);
    const { container, sessionId } = await liveSession(t);

    // A new credential closes links that present the older one (4003).
    const issued = await t.call("POST", "/v1/runners/embedded/token");
    expect(issued.status).toBe(201);
    await waitFor("the runner saw its link lost", () => !first.link.attached);
    await waitFor("the session DISCONNECTED", async () => (await stateOf(t!, sessionId)) === "DISCONNECTED");
    await waitFor("the runner redialing", () =>
      first.logs.some((l) => l.includes("runner link lost; reconnecting")),
    );
    // It redials with the credential it was given, now refused (401), and keeps trying.
    await waitFor("the redial refused", () =>
      first.logs.some((l) => l.includes("server refused the runner link") && l.includes("401")),
    );
    first.link.close();

    // The runner back with its new credential and its authoritative set: READY again (§3).
    const again = embedded(t, issued.body.token as string, () => [
      { session_id: sessionId, container_name: container, state: "READY" },
    ]);
    await waitFor("the link attached again", () => again.link.attached);
    await waitFor("the session READY", async () => (await stateOf(t!, sessionId)) === "READY");
  });

  it("§5 a link the runner closes: the server marks its sessions DISCONNECTED and fails nothing else", async () => {
    t = await startTestServer();
    const { link } = embedded(t, await t.server.issueRunnerCredential("embedded"));
    await waitFor("the link attached", () => link.attached);
    const { sessionId } = await liveSession(t);
    link.close();
    await waitFor("the session DISCONNECTED", async () => (await stateOf(t!, sessionId)) === "DISCONNECTED");
    expect(await runnerConnected(t)).toBe(false);
  });

  it("§8 backpressure: while the hub's inbox is full it takes nothing more, and the runner's backlog (what its agents wait on) holds the rest until it drains", async () => {
    t = await startTestServer();
    const { link } = embedded(t, await t.server.issueRunnerCredential("embedded"));
    await waitFor("the link attached", () => link.attached);
    const { sessionId } = await liveSession(t);
    for (let i = 0; i < 3_000; i++)
      link.send({
        version: RUNNER_PROTOCOL_VERSION,
        type: "frame",
        payload: {
          session_id: sessionId,
          frame: { protocol: "compass.v1", type: "log", payload: { text: `line ${i}` } },
        },
      });
    const sent = link.backlog;
    expect(sent).toBeGreaterThan(3_000 * 100);
    // Taken in a later turn (over a port, its acknowledgement a turn or two after).
    for (let i = 0; i < 100 && link.backlog === sent; i++) await nextTurn();
    // The hub paused after 1,000 store writes waiting: the rest is still the runner's backlog.
    expect(link.backlog).toBeGreaterThan(0);
    expect(link.backlog).toBeLessThan(sent);
    await waitFor("the backlog drained", () => link.backlog === 0);
  });
});
