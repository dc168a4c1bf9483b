import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Usage } from "../../contracts/adapter.ts";
import type { GatewayGrant } from "../../contracts/runner-protocol.ts";
import { type ModelServer, startModelServer } from "../../test/fixtures/model-server.ts";
import { decide, usageOf } from "../../test/fixtures/model-replies.ts";
import { type Gateway, type GatewayEvents, startGateway } from "./gateway.ts";
import { GatewayRoutes } from "./routes.ts";

const REAL_KEY = "sk-real-provider-key-0123456789";

let model: ModelServer;
let routes: GatewayRoutes;
let gateway: Gateway;
let usages: { key: string; model: string; usage: Usage }[];
let refusals: { key: string; reason: string; message: string }[];
/** What happened in order: "usage" from the callback, client-side markers from the tests. */
let timeline: string[];
const closers: (() => Promise<void>)[] = [];

beforeEach(async () => {
  model = await startModelServer("127.0.0.1");
  routes = new GatewayRoutes();
  usages = [];
  refusals = [];
  timeline = [];
  const events: GatewayEvents = {
    onUsage: (route, report) => {
      timeline.push("usage");
      usages.push({ key: route.key, ...report });
    },
    onRefused: (route, refusal) => refusals.push({ key: route.key, ...refusal }),
  };
  gateway = await startGateway({ host: "127.0.0.1", port: 0, routes, events });
});
afterEach(async () => {
  await gateway.close();
  await model.close();
  for (const close of closers.splice(0)) await close();
});

function grantFor(upstream: string, extra: Partial<GatewayGrant> = {}): GatewayGrant {
  return { agent: "default/a", upstream, ...extra };
}

/** A route to the model server with the real key; its gateway token. */
function session(key = "ws-1", extra: Partial<GatewayGrant> = {}): string {
  return routes.ensure(key, grantFor(model.url, extra), { OPENAI_API_KEY: REAL_KEY }).tokens.OPENAI_API_KEY!;
}

function ask(text: string, extra: Record<string, unknown> = {}) {
  return { model: "m-1", messages: [{ role: "user", content: text }], ...extra };
}

/** What the model server reports for this one-message call (the fixture's own maths). */
function expectedUsage(text: string): Usage {
  const messages = [{ role: "user" as const, content: text }];
  const u = usageOf(messages, decide(messages));
  return { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens };
}

function chat(
  token: string,
  body: unknown,
  headers: Record<string, string> = {},
  path = "/chat/completions",
) {
  return fetch(`${gateway.baseUrlFor(model.url)}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

/** The OpenAI-style error of a refusal. */
async function errorOf(res: Response): Promise<{ message: string; type: string; code: string }> {
  return ((await res.json()) as { error: { message: string; type: string; code: string } }).error;
}

/** The `data:` payloads of an SSE body. */
function events(text: string): string[] {
  return text
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice(6));
}

type Seen = { url: string; headers: IncomingHttpHeaders; body: string; closed: boolean };
/** A loopback upstream that records what reaches it; `reply` answers (default: a small JSON completion). */
async function startRecorder(reply?: (req: IncomingMessage, res: ServerResponse, seen: Seen) => void) {
  const seen: Seen[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const record: Seen = {
      url: req.url ?? "",
      headers: req.headers,
      body: Buffer.concat(chunks).toString(),
      closed: false,
    };
    seen.push(record);
    res.once("close", () => {
      record.closed = true;
    });
    if (reply) return reply(req, res, record);
    res.writeHead(200, { "content-type": "application/json" }).end('{"choices":[]}');
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/openai/v1/`;
  closers.push(
    () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  return { url, seen };
}

describe("the model gateway", () => {
  it("baseUrlFor keeps the upstream's path (trailing slash trimmed) on the gateway's host and port", () => {
    expect(gateway.baseUrlFor("http://10.213.0.1:11434/v1")).toBe(`http://127.0.0.1:${gateway.port}/v1`);
    expect(gateway.baseUrlFor("https://api.example.com/openai/v1/")).toBe(
      `http://127.0.0.1:${gateway.port}/openai/v1`,
    );
  });

  it("forwards a call with the real key in place of the token and reports the provider's usage", async () => {
    const token = session();
    const res = await chat(token, ask("hello gateway"));
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(JSON.parse(text).choices[0].message.content).toBe("echo: hello gateway");
    expect(model.authHeaders).toEqual([`Bearer ${REAL_KEY}`]);
    expect(text).not.toContain(REAL_KEY);
    expect(usages).toEqual([{ key: "ws-1", model: "m-1", usage: expectedUsage("hello gateway") }]);
  });

  it("streams: asks the provider for usage, strips the usage-only chunk the client did not ask for", async () => {
    const recorder = await startRecorder((_req, res, seen) => {
      const body = JSON.parse(seen.body);
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(
        `data: ${JSON.stringify({ model: "served-model", choices: [{ delta: { content: "hi" } }] })}\n\n`,
      );
      if (body.stream_options?.include_usage)
        res.write(
          `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 4 } })}\n\n`,
        );
      res.end("data: [DONE]\n\n");
    });
    const token = routes.ensure("ws-r", grantFor(recorder.url), { KEY: REAL_KEY }).tokens.KEY!;
    const res = await fetch(`${gateway.baseUrlFor(recorder.url)}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: JSON.stringify(ask("hi", { stream: true, stream_options: { other: 1 } })),
    });
    const body = await res.text();
    expect(JSON.parse(recorder.seen[0]!.body).stream_options).toEqual({ other: 1, include_usage: true });
    expect(events(body)).toHaveLength(2);
    expect(body).not.toContain("usage");
    expect(body.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(usages).toEqual([
      { key: "ws-r", model: "served-model", usage: { input_tokens: 11, output_tokens: 4 } },
    ]);
  });

  it("streams the usage chunk through when the client asked for it, and reports it", async () => {
    const token = session();
    const res = await chat(
      token,
      ask("two words", { stream: true, stream_options: { include_usage: true } }),
    );
    const body = await res.text();
    const chunks = events(body)
      .filter((e) => e !== "[DONE]")
      .map((e) => JSON.parse(e));
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 2 } });
    expect(usages.map((u) => u.usage)).toEqual([expectedUsage("two words")]);
  });

  it("forwards each chunk as it arrives (the upstream waits for the client to see the first)", async () => {
    let firstSeen!: () => void;
    const seenByClient = new Promise<void>((r) => {
      firstSeen = r;
    });
    const recorder = await startRecorder(async (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(`data: ${JSON.stringify({ choices: [{ delta: { content: "first" } }] })}\n\n`);
      await seenByClient; // a gateway that held the reply back would never get past here
      res.write(
        `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } })}\n\n`,
      );
      res.end("data: [DONE]\n\n");
    });
    const token = routes.ensure("ws-r", grantFor(recorder.url), { KEY: REAL_KEY }).tokens.KEY!;
    const res = await fetch(`${gateway.baseUrlFor(recorder.url)}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: JSON.stringify(ask("x", { stream: true })),
    });
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('"first"');
    firstSeen();
    while (!(await reader.read()).done) {}
    timeline.push("client saw the end");
    expect(timeline).toEqual(["usage", "client saw the end"]);
    expect(usages[0]?.usage).toEqual({ input_tokens: 1, output_tokens: 1 });
  });

  it("a client going away cancels the upstream call; its usage is unavailable", async () => {
    const recorder = await startRecorder((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(`data: ${JSON.stringify({ choices: [{ delta: { content: "still " } }] })}\n\n`);
    });
    const token = routes.ensure("ws-r", grantFor(recorder.url), { KEY: REAL_KEY }).tokens.KEY!;
    const controller = new AbortController();
    const res = await fetch(`${gateway.baseUrlFor(recorder.url)}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: JSON.stringify(ask("x", { stream: true })),
      signal: controller.signal,
    });
    await res.body!.getReader().read();
    controller.abort();
    await expect.poll(() => recorder.seen[0]?.closed).toBe(true);
    await expect.poll(() => usages).toEqual([{ key: "ws-r", model: "m-1", usage: "unavailable" }]);
  });

  it("finds the token in x-api-key and api-key too, swaps every token of the route, drops hop-by-hop headers", async () => {
    const recorder = await startRecorder();
    const route = routes.ensure("ws-r", grantFor(recorder.url), { A: "value-a", B: "value-b" });
    const url = `${gateway.baseUrlFor(recorder.url)}/chat/completions?api-version=2024`;
    for (const header of ["x-api-key", "api-key"]) {
      // node:http, not fetch: fetch never sends `connection` or `proxy-authorization` itself.
      const status = await new Promise<number | undefined>((resolve, reject) => {
        const req = httpRequest(url, {
          method: "POST",
          headers: {
            [header]: route.tokens.A!,
            authorization: `Bearer ${route.tokens.B} ${route.tokens.A}`,
            connection: "keep-alive, x-hop",
            "x-hop": "1",
            "proxy-authorization": "Basic eA==",
            "x-kept": "yes",
          },
        });
        req.once("error", reject);
        req.once("response", (res) => {
          res.resume();
          res.once("end", () => resolve(res.statusCode));
        });
        req.end("{}");
      });
      expect(status).toBe(200);
    }
    expect(recorder.seen.map((s) => s.headers["x-api-key"] ?? s.headers["api-key"])).toEqual([
      "value-a",
      "value-a",
    ]);
    for (const seen of recorder.seen) {
      expect(seen.url).toBe("/api/openai/v1/chat/completions?api-version=2024");
      expect(seen.headers.authorization).toBe("Bearer value-b value-a");
      expect(seen.headers.host).toBe(new URL(recorder.url).host);
      expect(seen.headers["x-hop"]).toBeUndefined();
      expect(seen.headers["proxy-authorization"]).toBeUndefined();
      expect(seen.headers["x-kept"]).toBe("yes");
      expect(JSON.stringify(seen.headers)).not.toContain("asgw_");
    }
  });

  it("finds the token in x-api-key when the bearer is some other key", async () => {
    const recorder = await startRecorder();
    const route = routes.ensure("ws-r", grantFor(recorder.url), { KEY: REAL_KEY });
    const res = await fetch(`${gateway.baseUrlFor(recorder.url)}/messages`, {
      method: "POST",
      headers: { authorization: "Bearer harness-own-key", "x-api-key": route.tokens.KEY! },
      body: "{}",
    });
    expect(res.status).toBe(200);
    expect(recorder.seen[0]?.headers).toMatchObject({
      authorization: "Bearer harness-own-key",
      "x-api-key": REAL_KEY,
    });
  });

  it("refuses an unknown or dropped token with 401 and an OpenAI-style error that never echoes it", async () => {
    const token = session();
    routes.drop("ws-1");
    for (const t of [token, "asgw_made-up", "sk-anything"]) {
      const res = await chat(t, ask("hi"));
      const text = await res.text();
      expect(res.status).toBe(401);
      expect(JSON.parse(text).error).toMatchObject({
        type: "invalid_request_error",
        code: "invalid_api_key",
      });
      expect(text).not.toContain(t);
    }
    expect(model.requests).toBe(0);
  });

  it("refuses a route whose Agent has no model (403)", async () => {
    const token = routes.ensure("ws-none", undefined, { KEY: REAL_KEY }).tokens.KEY!;
    const res = await chat(token, ask("hi"));
    expect(res.status).toBe(403);
    expect((await errorOf(res)).message).toMatch(/Agent .* has no model/);
    expect(model.requests).toBe(0);
  });

  it("forwards only under the upstream's path (404 elsewhere, dot segments included)", async () => {
    const token = session();
    // node:http sends the path as written (fetch would resolve the dot segments itself).
    for (const path of ["/admin", "/v10/chat/completions", "/v1/../admin", "/v1/%2e%2e/admin"]) {
      const { status, body } = await new Promise<{ status?: number; body: string }>((resolve, reject) => {
        const req = httpRequest({
          host: "127.0.0.1",
          port: gateway.port,
          path,
          headers: { authorization: `Bearer ${token}` },
        });
        req.once("error", reject);
        req.once("response", async (res) => {
          let text = "";
          for await (const c of res) text += c;
          resolve({ status: res.statusCode, body: text });
        });
        req.end();
      });
      expect(status, path).toBe(404);
      expect(JSON.parse(body).error.code).toBe("not_found");
    }
    expect(model.requests).toBe(0);
  });

  it("a client gone halfway through its body: nothing forwarded, the next call goes through", async () => {
    const token = session();
    await new Promise<void>((resolve) => {
      const req = httpRequest(`${gateway.baseUrlFor(model.url)}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-length": "1000" },
      });
      req.once("error", () => resolve());
      req.write('{"model":', () => setTimeout(() => req.destroy(), 50));
    });
    expect((await chat(token, ask("after"))).status).toBe(200);
    expect(model.requests).toBe(1);
    expect(usages).toHaveLength(1);
  });

  it("refuses a request body over 16 MiB (413)", async () => {
    const token = session();
    const res = await chat(token, ask("x".repeat(16 * 1024 * 1024 + 1)));
    expect(res.status).toBe(413);
    expect(model.requests).toBe(0);
  });

  it("refuses a chunked request body once it passes 16 MiB (413), no length declared", async () => {
    const token = session();
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const req = httpRequest(`${gateway.baseUrlFor(model.url)}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "transfer-encoding": "chunked" },
      });
      req.once("error", reject);
      req.once("response", (res) => {
        res.resume();
        resolve(res.statusCode);
      });
      const piece = Buffer.alloc(1024 * 1024, 120);
      for (let i = 0; i < 17; i++) req.write(piece);
      req.end();
    });
    expect(status).toBe(413);
    expect(model.requests).toBe(0);
  });

  it("refuses a model outside the Agent's list (403, ModelNotAllowed naming both)", async () => {
    const token = session("ws-1", { models: ["m-1", "m-2"] });
    expect((await chat(token, ask("ok"))).status).toBe(200);
    const res = await chat(token, ask("no", { model: "gpt-expensive" }));
    expect(res.status).toBe(403);
    const message = (await errorOf(res)).message;
    expect(message).toBe('Agent default/a may not use model "gpt-expensive"; its allowed models: m-1, m-2.');
    expect(refusals).toEqual([{ key: "ws-1", reason: "ModelNotAllowed", message }]);
    expect(model.requests).toBe(1);
  });

  it("enforces requestsPerMinute across all routes of the Agent (429, RequestRateExceeded, retry-after)", async () => {
    const a = session("ws-a", { limits: { requestsPerMinute: 2 } });
    const b = session("ws-b", { limits: { requestsPerMinute: 2 } });
    expect((await chat(a, ask("1"))).status).toBe(200);
    expect((await chat(b, ask("2"))).status).toBe(200);
    const res = await chat(b, ask("3"));
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    const error = await errorOf(res);
    expect(error.message).toMatch(
      /^Agent default\/a may make 2 model calls a minute and has made them; try again in \d+ s\.$/,
    );
    expect(refusals).toEqual([{ key: "ws-b", reason: "RequestRateExceeded", message: error.message }]);
    expect(model.requests).toBe(2);
  });

  it("enforces tokensPerDay from the provider's usage (429, TokenBudgetExceeded, until 00:00 UTC)", async () => {
    const token = session("ws-1", { limits: { tokensPerDay: 3 } });
    expect((await chat(token, ask("uses several tokens"))).status).toBe(200);
    const res = await chat(token, ask("one more"));
    expect(res.status).toBe(429);
    const midnight = new Date();
    midnight.setUTCHours(24, 0, 0, 0);
    expect(Number(res.headers.get("retry-after"))).toBeCloseTo((midnight.getTime() - Date.now()) / 1000, -1);
    const error = await errorOf(res);
    expect(error.message).toMatch(
      /^Agent default\/a has used \d+ of its 3 model tokens for today \(UTC\); the budget resets at 00:00 UTC/,
    );
    expect(refusals.map((r) => r.reason)).toEqual(["TokenBudgetExceeded"]);
    expect(model.requests).toBe(1);
  });

  it("forwards a GET (a harness reading the model list) without counting it as a model call", async () => {
    const token = session();
    const listed = await fetch(`${gateway.baseUrlFor(model.url)}/models`, {
      headers: { authorization: `Bearer ${token}` },
    });
    // The fixture answers only chat completions: its 404 came back through the gateway.
    expect(listed.status).toBe(404);
    expect(model.authHeaders).toEqual([]);
    expect(usages).toEqual([]);
  });

  it("reports usage unavailable when the provider sent none or failed", async () => {
    const token = session();
    for (const [body, status] of [
      [ask("quiet [nousage]"), 200],
      [ask("quiet [nousage]", { stream: true }), 200],
      [ask("[fail]"), 500],
    ] as const) {
      const res = await chat(token, body);
      await res.text();
      expect(res.status).toBe(status);
    }
    expect(usages.map((u) => u.usage)).toEqual(["unavailable", "unavailable", "unavailable"]);
  });

  it("answers 502 when the upstream is unreachable, naming neither key nor token", async () => {
    const unreachable = "http://127.0.0.1:9/v1";
    const token = routes.ensure("ws-x", grantFor(unreachable), { KEY: REAL_KEY }).tokens.KEY!;
    const res = await fetch(`${gateway.baseUrlFor(unreachable)}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: JSON.stringify(ask("hi")),
    });
    const text = await res.text();
    expect(res.status).toBe(502);
    expect(JSON.parse(text).error.message).toMatch(
      /could not reach Agent default\/a's model endpoint http:\/\/127\.0\.0\.1:9\/v1/,
    );
    expect(text).not.toContain(REAL_KEY);
    expect(text).not.toContain(token);
    expect(usages).toEqual([{ key: "ws-x", model: "m-1", usage: "unavailable" }]);
  });
});
