/**
 * Issue 14, "a runner token holder can hijack a runner", end to end with real parts only:
 * `serve --no-runner`, a real `agent-sessions runner` process (`e2e`) on the test bed's dockerd
 * with one live reference session, and raw WebSocket clients playing the impostor. Shown
 * (PROTOCOL.md §2, §8): a `hello` with the real runner's name is refused (4003) whether the
 * impostor holds the shared runner token or a credential of its own (issued to a name it
 * registered); the real runner keeps its link, record and session, which goes on answering;
 * frames, states and relay chunks an impostor sends for a session it does not own are dropped
 * and logged; the real runner comes back after a SIGKILL with the credential it kept (0600), and
 * `serve`'s embedded runner attaches with no step of the user's, across a restart too.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RUNNER_PROTOCOL_VERSION } from "../../contracts/runner-protocol.ts";
import { removeEverything, SessionFollower, setUpNamespace } from "../support/agent-system.ts";
import { launch, System, until } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

const NS = `rid-${randomBytes(3).toString("hex")}`;
const system = new System();
const provisioned = new Set<string>();
let session = { container_name: "", session_id: "" };
let follower: SessionFollower;

type Outcome = { status?: number; code?: number; credential?: string };

/** A raw link: upgrade with `token`, say hello as `name`, run `then` once welcomed. */
function rawLink(token: string, name: string, then?: (ws: WebSocket) => Promise<void>): Promise<Outcome> {
  const ws = new WebSocket(`${system.url.replace(/^http/, "ws")}/v1/runners/connect`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return new Promise((resolve) => {
    ws.on("unexpected-response", (_req, res) => {
      resolve({ status: res.statusCode });
      ws.terminate();
    });
    ws.on("error", () => {});
    ws.on("open", () =>
      ws.send(
        JSON.stringify({
          version: RUNNER_PROTOCOL_VERSION,
          type: "hello",
          payload: {
            runner_name: name,
            capacity: 1_000_000,
            labels: { zone: "evil" },
            engine: "docker",
            sessions: [],
          },
        }),
      ),
    );
    ws.on("message", (data) => {
      const message = JSON.parse(String(data));
      if (message.type !== "welcome") return;
      void (then?.(ws) ?? Promise.resolve()).then(() => {
        resolve({ credential: message.payload.credential });
        ws.close();
      });
    });
    ws.on("close", (code) => resolve({ code }));
  });
}

const serverLog = () => (system.server?.logs ?? []).join("");
const runnerLog = () => (system.runner?.logs ?? []).join("");

async function realRunner() {
  const res = await system.call("GET", "/v1/runners/e2e");
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as {
    runner_id: string;
    capacity: number;
    labels: Record<string, string>;
    connected: boolean;
  };
}

async function stateOf(sessionId: string): Promise<string> {
  const res = await system.rpc("GetAgentStatus", { session_id: sessionId });
  return res.body.sessions?.[0]?.state;
}

/** The session still answers: a message to its agent comes back as an echo frame. */
async function answers(text: string): Promise<void> {
  const sent = await system.rpc("SendAgentMessage", {
    session_id: session.session_id,
    message: { type: "message", text },
  });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  await until(`echo of ${text}`, () =>
    follower.frames.find((f) => f.type === "message" && f.payload.text === `echo: ${text}`),
  );
}

beforeAll(async () => {
  await system.startServer();
  await system.startRunner();
  await setUpNamespace(system, NS, ["a"]);
  const res = await system.rpc("SpawnAgent", { agent_ref: `${NS}/a`, client_request_id: "rid-1" });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  session = res.body;
  provisioned.add(session.container_name);
  follower = new SessionFollower(system, session.session_id);
  await answers("before");
});

afterEach((context) => {
  if (context.task.result?.state !== "fail") return;
  process.stderr.write(`--- server log (tail) ---\n${serverLog().slice(-5_000)}\n`);
  process.stderr.write(`--- runner log (tail) ---\n${runnerLog().slice(-5_000)}\n`);
});

afterAll(async () => {
  await follower?.close();
  const forced = await removeEverything(system, NS, provisioned);
  if (forced.length > 0) console.warn(`runner-identity: forced removal of ${forced.join(", ")}`);
  await system.stop();
  rmSync(system.dataDir, { recursive: true, force: true });
});

describe("PROTOCOL.md §2: a hello with another live runner's name is refused", () => {
  it("refuses the shared runner token for the real runner's name (4003); the real runner and its session are untouched", async () => {
    const before = await realRunner();
    const linkLosses = runnerLog().split("runner link lost").length;

    expect(await rawLink(system.runnerToken, "e2e")).toEqual({ code: 4003 });

    expect(serverLog()).toMatch(/runner link refused: not that runner.*"runner_name":"e2e"/);
    expect(await realRunner()).toEqual(before); // connected, capacity and labels as the real runner said
    expect(before).toMatchObject({ connected: true, capacity: 100, labels: {} });
    expect(runnerLog().split("runner link lost").length).toBe(linkLosses); // never superseded
    expect(await stateOf(session.session_id)).toBe("READY");
    await answers("after the runner-token impostor");
  });

  it("refuses a credential of another runner (a thief's own) for the real runner's name; what the thief sends for the session is dropped", async () => {
    const forged = `forged-${randomBytes(3).toString("hex")}`;
    // The thief registers a name of its own with the runner token and gets a credential for it,
    // then speaks for the real runner's session from there.
    const thief = await rawLink(system.runnerToken, "thief", async (ws) => {
      const send = (type: string, payload: unknown) =>
        ws.send(JSON.stringify({ version: RUNNER_PROTOCOL_VERSION, type, payload }));
      send("frame", {
        session_id: session.session_id,
        frame: {
          protocol: "compass.v1",
          type: "message",
          ts: new Date().toISOString(),
          payload: { text: forged },
        },
      });
      send("session_state", { session_id: session.session_id, state: "ERRORED", reason: "Forged" });
      send("relay_chunk", {
        relay_id: randomBytes(8).toString("hex"),
        data: forged,
        done: true,
        status: 200,
      });
      await until(
        "the server to drop the thief's messages",
        () =>
          /relay chunk for a request not sent to it; dropped/.test(serverLog()) &&
          /runner spoke for a session not placed on it; dropped/.test(serverLog()),
      );
    });
    expect(thief.credential).toMatch(/^asr_/);

    expect(await rawLink(thief.credential ?? "", "e2e")).toEqual({ code: 4003 });
    expect(await rawLink(`asr_${randomBytes(32).toString("base64url")}`, "e2e")).toEqual({ status: 401 });

    expect(await realRunner()).toMatchObject({ connected: true, capacity: 100, labels: {} });
    expect(await stateOf(session.session_id)).toBe("READY");
    await answers("after the credential impostor");
    expect(follower.frames.some((f) => JSON.stringify(f.payload).includes(forged))).toBe(false);
    expect(follower.states).not.toContain("ERRORED(Forged)");
  });
});

describe("PROTOCOL.md §2: the real runner's own credential", () => {
  it("is kept 0600 in its data dir and brings a SIGKILLed runner back under its name and id", async () => {
    const file = join(system.dataDir, "runner", "runner-credential");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, "utf8")).toMatch(/^asr_/);
    const { runner_id } = await realRunner();
    await system.kill("runner", "SIGKILL");
    await system.startRunner();
    expect(await realRunner()).toMatchObject({ runner_id, connected: true });
    expect(runnerLog()).not.toMatch(/server refused/);
    await until("the session READY again", async () => (await stateOf(session.session_id)) === "READY");
  });

  it("serve's embedded runner attaches with nothing to set up, also after a restart of serve", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "as-embedded-"));
    try {
      for (let start = 0; start < 2; start++) {
        const serve = await launch(
          ["serve", "--port", "0", "--data-dir", dataDir],
          { ...system.env(), AGENT_SESSIONS_ENGINE: "docker" },
          /runner attached/,
        );
        try {
          const url = serverUrlOf(serve.logs.join(""));
          const admin = readFileSync(join(dataDir, "admin-token"), "utf8").trim();
          const res = await fetch(`${url}/v1/runners/embedded`, {
            headers: { authorization: `Bearer ${admin}` },
          });
          expect(await res.json()).toMatchObject({ runner_name: "embedded", connected: true });
        } finally {
          serve.child.kill("SIGTERM");
          await serve.exited;
        }
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

function serverUrlOf(logs: string): string {
  const url = logs.match(/"url":"(http:\/\/[^"]+)"/)?.[1];
  if (!url) throw new Error(`no server URL in ${logs.slice(-500)}`);
  return url;
}
