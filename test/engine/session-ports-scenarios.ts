/**
 * A session's declared ports (issue 40) on one engine, real parts only: a server and a runner over
 * the real WebSocket, the engine and the reference runtime. A process started in the session
 * listens on a declared port; what a user checks: it answers through the proxy with a port token,
 * over HTTP (path, query, method and body passed, the caller's token not) and over WebSocket
 * (echo); the same token is refused for another declared port, for the session's request API,
 * its status and any other API; an undeclared port and the adapter's are refused; bad `spec.ports`
 * (out of range, the adapter's port, duplicated) is a 400 that changes nothing; port traffic
 * counts as the session's activity.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe, kubectl, kubernetesProbe } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

export type PortsScenarioOptions = {
  engine: "docker" | "kubernetes";
  /** Appended to every session name: the cluster is shared by test files. */
  suffix?: string;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const READY_MS = 300_000;
const WEB = 3000;
const OTHER = 3001;
const execFileAsync = promisify(execFile);

/**
 * A tiny HTTP + WebSocket server for the session's Node (no packages in the image): HTTP answers
 * what it was asked as JSON; a WebSocket echoes text as `echo:<text>` and binary as it is.
 * RFC 6455 framing by hand, enough for short messages.
 */
const SERVER = `
const http = require("http"), crypto = require("crypto");
const port = Number(process.argv[1]);
const s = http.createServer((q, r) => {
  const b = [];
  q.on("data", (d) => b.push(d));
  q.on("end", () => {
    r.setHeader("content-type", "application/json");
    r.setHeader("x-served-by", "port-" + port);
    r.end(JSON.stringify({ port, method: q.method, url: q.url, body: Buffer.concat(b).toString(),
      authorization: q.headers.authorization ?? null, probe: q.headers["x-probe"] ?? null }));
  });
});
s.on("upgrade", (q, sock) => {
  const accept = crypto.createHash("sha1").update(q.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  sock.write("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + "\\r\\n\\r\\n");
  let buf = Buffer.alloc(0);
  sock.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 15;
      let len = buf[1] & 127, off = 2;
      if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
      if (buf.length < off + 4 + len) return;
      const mask = buf.subarray(off, off + 4); off += 4;
      const p = Buffer.from(buf.subarray(off, off + len));
      for (let i = 0; i < p.length; i++) p[i] ^= mask[i % 4];
      buf = buf.subarray(off + len);
      if (op === 8) { sock.end(Buffer.from([0x88, 0])); return; }
      if (op === 1 || op === 2) {
        const out = op === 1 ? Buffer.from("echo:" + p.toString()) : p;
        const h = out.length < 126 ? Buffer.from([0x80 | op, out.length]) : Buffer.from([0x80 | op, 126, out.length >> 8, out.length & 255]);
        sock.write(Buffer.concat([h, out]));
      }
    }
  });
});
s.listen(port, "0.0.0.0");
`;

export function sessionPortsScenarios(options: PortsScenarioOptions): void {
  const n = (name: string) => `${name}${options.suffix ?? ""}`;
  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  const call = (method: string, path: string, body?: unknown, token?: string) =>
    system.call(method, path, body, token);
  const manifest = (name: string, ports: unknown) => ({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "assistant", runtimeRef: "reference", ports },
  });
  const portUrl = (name: string, port: number, rest = "/") =>
    `${system.url}${SESSIONS}/${name}/ports/${port}${rest}`;

  async function phase(name: string, wanted: string): Promise<Json> {
    return until(
      `${name} ${wanted}`,
      async () => {
        const s = await call("GET", `${SESSIONS}/${name}`);
        if (s.body.status?.phase === wanted) return s.body;
        throw new Error(`phase ${s.body.status?.phase}`);
      },
      READY_MS,
    );
  }

  async function portToken(name: string, port: number): Promise<string> {
    const t = await call("POST", "/v1/tokens", {
      name: `p-${name}-${randomBytes(3).toString("hex")}`,
      scopes: [`session:default/${name}:port:${port}`],
      ttl: "10m",
    });
    expect(t.status, JSON.stringify(t.body)).toBe(201);
    expect(t.body.expiresAt).toBeDefined();
    return t.body.token as string;
  }

  /** A WebSocket through the proxy: the messages it got back, or the HTTP status of its refusal. */
  function socket(url: string, token: string): Promise<{ ws: WebSocket } | { refused: number }> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url.replace(/^http/, "ws"), { headers: { authorization: `Bearer ${token}` } });
      ws.once("open", () => resolve({ ws }));
      ws.once("unexpected-response", (_req, res) => {
        res.resume();
        resolve({ refused: res.statusCode ?? 0 });
      });
      ws.once("error", reject);
    });
  }

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
    probe = options.engine === "docker" ? dockerProbe() : await kubernetesProbe();
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const put = await call("PUT", `${NS}/agents/assistant`, modelAgent("assistant", model));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    for (const s of ["previewed", "refused"])
      await system?.call("DELETE", `${SESSIONS}/${n(s)}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`session ports (${options.engine})`, () => {
    it("a declared port answers through the proxy with a port token over HTTP and WebSocket; that token opens nothing else", async () => {
      const name = n("previewed");
      const put = await call(
        "PUT",
        `${SESSIONS}/${name}`,
        manifest(name, [
          { port: WEB, name: "web" },
          { port: OTHER, name: "other" },
        ]),
      );
      expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
      const session = await phase(name, "Ready");
      expect(session.spec.ports).toEqual([
        { port: WEB, name: "web" },
        { port: OTHER, name: "other" },
      ]);
      const workload = session.status.containerName as string;
      // The servers run as long as the session (the exec ends with the workload).
      for (const port of [WEB, OTHER])
        void probe.exec(workload, ["node", "-e", SERVER, String(port)]).catch(() => undefined);
      const token = await portToken(name, WEB);
      const auth = { authorization: `Bearer ${token}` };
      const first = await until(
        "the session's server answers through the proxy",
        async () => {
          const r = await fetch(portUrl(name, WEB, "/hello?x=1&y=two"), {
            headers: { ...auth, "x-probe": "yes" },
          });
          return r.status === 200 ? r : undefined;
        },
        60_000,
      );
      expect(first.headers.get("x-served-by")).toBe(`port-${WEB}`);
      // Served from the API's origin, the session's page is sandboxed into an origin of its own.
      expect(first.headers.get("content-security-policy")).toMatch(/^sandbox allow-scripts/);
      const seen = (await first.json()) as Json;
      expect(seen).toMatchObject({ port: WEB, method: "GET", url: "/hello?x=1&y=two", probe: "yes" });
      // The caller's token is the proxy's: never passed to the session.
      expect(seen.authorization).toBeNull();

      const posted = await fetch(portUrl(name, WEB, "/submit"), {
        method: "POST",
        headers: { ...auth, "content-type": "text/plain" },
        body: "a body for the session",
      });
      expect(posted.status).toBe(200);
      expect(await posted.json()).toMatchObject({
        method: "POST",
        url: "/submit",
        body: "a body for the session",
      });

      // The same port over WebSocket: text and binary echo.
      const opened = await socket(portUrl(name, WEB, "/ws"), token);
      if (!("ws" in opened)) throw new Error(`the WebSocket was refused with ${opened.refused}`);
      const replies: string[] = [];
      const got = new Promise<void>((resolve) => {
        opened.ws.on("message", (data, isBinary) => {
          replies.push(isBinary ? `binary:${Buffer.from(data as Buffer).toString("hex")}` : String(data));
          if (replies.length === 2) resolve();
        });
      });
      opened.ws.send("hi there");
      opened.ws.send(Buffer.from([1, 2, 3]));
      await got;
      expect(replies).toEqual(["echo:hi there", "binary:010203"]);
      opened.ws.close();

      // The same token: not the other declared port (HTTP or WebSocket), not the session's
      // request API, not its status, not the namespace's sessions, not the tokens.
      const otherPort = await fetch(portUrl(name, OTHER, "/hello"), { headers: auth });
      expect(otherPort.status).toBe(403);
      expect(((await otherPort.json()) as Json).code).toBe("PERMISSION_DENIED");
      const otherSocket = await socket(portUrl(name, OTHER, "/ws"), token);
      expect(otherSocket).toEqual({ refused: 403 });
      const chat = await call("POST", `${SESSIONS}/${name}/requests`, { input: "hello" }, token);
      expect(chat.status).toBe(403);
      expect((await call("GET", `${SESSIONS}/${name}`, undefined, token)).status).toBe(403);
      expect((await call("GET", SESSIONS, undefined, token)).status).toBe(403);
      expect((await call("GET", "/v1/tokens", undefined, token)).status).toBe(403);
      // The other port answers with a token that opens it (the admin's).
      const viaAdmin = await fetch(portUrl(name, OTHER, "/x"), {
        headers: { authorization: `Bearer ${system.adminToken}` },
      });
      expect(viaAdmin.status).toBe(200);
      expect(((await viaAdmin.json()) as Json).port).toBe(OTHER);

      // An undeclared port and the adapter's own are not reachable, whatever the token.
      const undeclared = await fetch(portUrl(name, 3002, "/"), {
        headers: { authorization: `Bearer ${system.adminToken}` },
      });
      expect(undeclared.status).toBe(404);
      expect(((await undeclared.json()) as Json).message).toMatch(/port 3002 is not declared/);
      const adapter = await fetch(portUrl(name, 8080, "/v1/requests"), {
        method: "POST",
        headers: { authorization: `Bearer ${system.adminToken}` },
        body: "{}",
      });
      expect(adapter.status).toBe(404);

      // Port traffic is the session's activity: counted like its requests.
      const after = await call("GET", `${SESSIONS}/${name}`);
      expect(after.body.status.requestCount).toBeGreaterThanOrEqual(4);
      expect(after.body.status.lastRequestId).toMatch(/^port-300[01]-/);

      // A preview link's token, minted by the session's own chat token (what the UI holds):
      // short-lived, with the port's URL; the CLI mints the same.
      const chatToken = await call("POST", "/v1/tokens", {
        name: `c-${name}-${randomBytes(3).toString("hex")}`,
        scopes: [`session:default/${name}:chat`],
      });
      expect(chatToken.status).toBe(201);
      const minted = await call(
        "POST",
        `${SESSIONS}/${name}/porttokens`,
        { port: WEB, ttl: "5m" },
        chat.body.token,
      );
      expect(minted.status, JSON.stringify(minted.body)).toBe(201);
      expect(minted.body.scopes).toEqual([`session:default/${name}:port:${WEB}`]);
      expect(Date.parse(minted.body.expiresAt) - Date.now()).toBeLessThanOrEqual(5 * 60_000);
      expect(minted.body.url).toBe(portUrl(name, WEB));
      const viaLink = await fetch(`${minted.body.url}page`, {
        headers: { authorization: `Bearer ${minted.body.token}` },
      });
      expect(viaLink.status).toBe(200);
      expect(((await viaLink.json()) as Json).url).toBe("/page");
      const undeclaredToken = await call(
        "POST",
        `${SESSIONS}/${name}/porttokens`,
        { port: 3002 },
        chat.body.token,
      );
      expect(undeclaredToken.status).toBe(404);
      const cli = await system.runCli([
        "port-token",
        name,
        String(OTHER),
        "--ttl",
        "2m",
        "--server",
        system.url,
        "--token",
        chatToken.body.token,
      ]);
      expect(cli.code, cli.stderr).toBe(0);
      const [cliUrl, cliToken] = cli.stdout.trim().split("\n").slice(-2);
      expect(cliUrl).toBe(portUrl(name, OTHER));
      const viaCli = await fetch(`${cliUrl}`, { headers: { authorization: `Bearer ${cliToken}` } });
      expect(((await viaCli.json()) as Json).port).toBe(OTHER);

      if (options.engine === "kubernetes") {
        // The session's network rules know its ports: the Service exposes them, the NetworkPolicy
        // admits the runner to the adapter's and exactly these.
        const objects = async (kind: string) =>
          JSON.parse(
            (
              await execFileAsync(kubectl(), ["-n", "agent-sessions", "get", kind, workload, "-o", "json"], {
                encoding: "utf8",
              })
            ).stdout,
          );
        const service = await objects("service");
        expect(service.spec.ports.map((p: Json) => p.port).sort()).toEqual([WEB, OTHER, 8080].sort());
        const policy = await objects("networkpolicy");
        expect(policy.spec.ingress).toHaveLength(1);
        expect(policy.spec.ingress[0].ports.map((p: Json) => p.port).sort()).toEqual(
          [WEB, OTHER, 8080].sort(),
        );
      } else {
        // A Paused session (Docker's freezer) is woken by its port's traffic and answers.
        const paused = await call("PATCH", `${SESSIONS}/${name}`, { spec: { desiredState: "paused" } });
        expect(paused.status).toBe(200);
        await phase(name, "Paused");
        const woken = await fetch(portUrl(name, WEB, "/after-pause"), { headers: auth });
        expect(woken.status).toBe(200);
        expect(((await woken.json()) as Json).url).toBe("/after-pause");
        const status = (await call("GET", `${SESSIONS}/${name}`)).body.status;
        expect(status.lastRequestId).toMatch(/^port-3000-/);
      }
    }, 600_000);

    it("bad ports are a 400 naming the field, and change nothing", async () => {
      const name = n("refused");
      for (const [ports, field] of [
        [[{ port: 80, name: "low" }], /spec\.ports\.0\.port|spec\.ports\[0\]\.port/],
        [[{ port: 70000, name: "high" }], /spec\.ports\.0\.port|spec\.ports\[0\]\.port/],
        [[{ port: 8080, name: "adapter" }], /adapter's own port 8080/],
        [
          [
            { port: 3000, name: "a" },
            { port: 3000, name: "b" },
          ],
          /port 3000 is declared twice/,
        ],
        [
          [
            { port: 3000, name: "a" },
            { port: 3001, name: "a" },
          ],
          /name a is declared twice/,
        ],
        [[{ port: 3000, name: "Not_A_Label" }], /DNS label/],
        [Array.from({ length: 9 }, (_, i) => ({ port: 3000 + i, name: `p${i}` })), /at most 8 ports/],
      ] as const) {
        const put = await call("PUT", `${SESSIONS}/${name}`, manifest(name, ports));
        expect(put.status, JSON.stringify(put.body)).toBe(400);
        expect(put.body.code).toBe("INVALID_ARGUMENT");
        expect(JSON.stringify(put.body)).toMatch(field);
      }
      // Nothing was created.
      expect((await call("GET", `${SESSIONS}/${name}`)).status).toBe(404);
      // A port token for a port out of range is not a scope.
      const bad = await call("POST", "/v1/tokens", {
        name: `p-bad-${randomBytes(3).toString("hex")}`,
        scopes: [`session:default/${n("previewed")}:port:80`],
      });
      expect(bad.status).toBe(400);
      // Declared ports are fixed: a change is refused and the session keeps its own.
      const patched = await call("PATCH", `${SESSIONS}/${n("previewed")}`, {
        spec: { ports: [{ port: 4000, name: "web" }] },
      });
      expect(patched.status).toBe(400);
      expect(patched.body.message).toMatch(/spec\.ports is immutable/);
      expect((await call("GET", `${SESSIONS}/${n("previewed")}`)).body.spec.ports).toHaveLength(2);
    }, 120_000);
  });
}
