import { type Context, Hono } from "hono";
import { requestId } from "hono/request-id";
import { streamSSE } from "hono/streaming";
import { describe, expect, it } from "vitest";
import type { ResultRecord } from "../../contracts/adapter.ts";
import { type AuditRecord, createAudit } from "../observability/audit.ts";
import { Metrics } from "../observability/metrics.ts";
import {
  markAuditedReply,
  markAuditedRequest,
  markAuditedStreamEnd,
  markAuditedStreamEndMarked,
  resultEnding,
} from "../observability/audited-request.ts";
import type { Principal } from "./api-tokens.ts";
import { auditProxiedRequests, fromJsonReply } from "./request-audit.ts";

const record = (outcome: ResultRecord["outcome"]): ResultRecord => ({
  id: "req-1",
  outcome,
  output: "the agent's words",
  usage: { input_tokens: 3, output_tokens: 5 },
  started_at: "2026-01-01T00:00:00Z",
  finished_at: "2026-01-01T00:00:01Z",
});

/** The proxy route with a stand-in relay answering `reply`. */
function appReplying(reply: (c: Context) => Response | Promise<Response>, principal?: Principal) {
  const audits: AuditRecord[] = [];
  const app = new Hono();
  app.use("*", requestId());
  if (principal)
    app.use("*", (c, next) => {
      c.set("principal", principal);
      return next();
    });
  app.use(
    "/v1/namespaces/:ns/harnesssessions/:name/requests",
    auditProxiedRequests((r) => audits.push(r)),
  );
  app.post("/v1/namespaces/:ns/harnesssessions/:name/requests", (c) => reply(c));
  const post = (headers: Record<string, string> = {}) =>
    app.request("/v1/namespaces/team/harnesssessions/chat/requests", { method: "POST", body: "{}", headers });
  return { audits, post };
}

describe("auditProxiedRequests", () => {
  it("names the caller's token by id and name, never the token itself", async () => {
    const principal: Principal = { id: "tok-1", name: "chat-u42", scopes: [] };
    const { audits, post } = appReplying((c) => c.json(record("succeeded")), principal);
    await post({ authorization: "Bearer ast_secret-never-audited" });
    expect(audits).toEqual([expect.objectContaining({ token_id: "tok-1", token_name: "chat-u42" })]);
    expect(JSON.stringify(audits)).not.toContain("ast_secret");
  });

  it("audits a JSON reply with its outcome, usage and the HTTP request id", async () => {
    const { audits, post } = appReplying((c) => c.json(record("succeeded")));
    const response = await post({ "x-request-id": "http-1" });
    expect(await response.json()).toEqual(record("succeeded"));
    expect(audits).toEqual([
      expect.objectContaining({
        http_request_id: "http-1",
        request_id: "req-1",
        namespace: "team",
        session: "chat",
        outcome: "succeeded",
        usage: { input_tokens: 3, output_tokens: 5 },
        stream: false,
      }),
    ]);
  });

  it("audits the request id the relay gave the request, never the one an adapter's record claims", async () => {
    const { audits, post } = appReplying((c) => {
      markAuditedRequest(c, "req-ours");
      return c.json({ ...record("succeeded"), id: "req-of-another-session" });
    });
    await post();
    expect(audits).toEqual([expect.objectContaining({ request_id: "req-ours", outcome: "succeeded" })]);
    const streamed = appReplying((c) => {
      markAuditedRequest(c, "req-ours");
      return streamSSE(c, async (stream) => {
        await stream.writeSSE({
          event: "result",
          data: JSON.stringify({
            type: "result",
            result: { ...record("succeeded"), id: "req-of-another-session" },
          }),
        });
      });
    });
    await (await streamed.post()).text();
    expect(streamed.audits).toEqual([
      expect.objectContaining({ request_id: "req-ours", outcome: "succeeded" }),
    ]);
  });

  it("audits a streamed reply once its result event has passed, unchanged for the client", async () => {
    const { audits, post } = appReplying((c) =>
      streamSSE(c, async (sse) => {
        await sse.writeSSE({ event: "delta", data: JSON.stringify({ type: "delta", text: "hel" }) });
        await sse.writeSSE({ event: "delta", data: JSON.stringify({ type: "delta", text: "lo" }) });
        await sse.writeSSE({
          event: "result",
          data: JSON.stringify({ type: "result", result: record("succeeded") }),
        });
      }),
    );
    const response = await post();
    const text = await response.text();
    expect(text).toContain('"text":"hel"');
    expect(text).toContain("event: result");
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ outcome: "succeeded", stream: true, request_id: "req-1" });
  });

  it("audits a stream that ended with an error event as failed, with its code", async () => {
    const { audits, post } = appReplying((c) =>
      streamSSE(c, async (sse) => {
        await sse.writeSSE({ event: "delta", data: JSON.stringify({ type: "delta", text: "x" }) });
        await sse.writeSSE({
          event: "error",
          data: JSON.stringify({ code: "DEADLINE_EXCEEDED", message: "slow" }),
        });
      }),
    );
    await (await post()).text();
    expect(audits[0]).toMatchObject({ outcome: "failed", code: "DEADLINE_EXCEEDED", usage: undefined });
  });

  it("takes the ending the relay marked (the record it built) without parsing the reply again", async () => {
    const json = appReplying((c) => {
      markAuditedRequest(c, "req-ours");
      const failed = record("failed");
      const body = { code: "UNAVAILABLE", message: "the agent could not", details: { result: failed } };
      markAuditedReply(c, body, resultEnding(failed, "UNAVAILABLE"));
      return c.json(body, 503);
    });
    await json.post();
    expect(json.audits).toEqual([
      expect.objectContaining({
        request_id: "req-ours",
        outcome: "failed",
        code: "UNAVAILABLE",
        usage: { input_tokens: 3, output_tokens: 5 },
        stream: false,
      }),
    ]);
    const streamed = appReplying((c) => {
      markAuditedRequest(c, "req-ours");
      markAuditedStreamEndMarked(c);
      return streamSSE(c, async (sse) => {
        await sse.writeSSE({ event: "delta", data: JSON.stringify({ type: "delta", text: "x" }) });
        const result = record("succeeded");
        markAuditedStreamEnd(c, { type: "result", result }, resultEnding(result));
        await sse.writeSSE({ event: "result", data: JSON.stringify({ type: "result", result }) });
      });
    });
    await (await streamed.post()).text();
    expect(streamed.audits).toEqual([
      expect.objectContaining({ request_id: "req-ours", outcome: "succeeded", stream: true }),
    ]);
    // A marked stream that ends without a mark failed.
    const unmarked = appReplying((c) => {
      markAuditedStreamEndMarked(c);
      return streamSSE(c, async (sse) => {
        await sse.writeSSE({
          event: "result",
          data: JSON.stringify({ type: "result", result: record("succeeded") }),
        });
      });
    });
    await (await unmarked.post()).text();
    expect(unmarked.audits).toEqual([expect.objectContaining({ outcome: "failed", code: "INTERNAL" })]);
  });

  it("audits a client that left mid-stream as cancelled", async () => {
    const { audits, post } = appReplying((c) =>
      streamSSE(c, async (sse) => {
        await sse.writeSSE({ event: "delta", data: JSON.stringify({ type: "delta", text: "x" }) });
        await sse.sleep(10_000);
      }),
    );
    const response = await post();
    const reader = response.body!.getReader();
    await reader.read();
    await reader.cancel();
    expect(audits[0]).toMatchObject({ outcome: "cancelled", code: "CANCELLED" });
  });
});

describe("fromJsonReply", () => {
  it("tells refusals before the agent from failures and cancellations", () => {
    expect(fromJsonReply(412, { code: "FAILED_PRECONDITION", message: "not Ready" }).outcome).toBe(
      "rejected",
    );
    expect(fromJsonReply(413, { code: "RESOURCE_EXHAUSTED", message: "too big" }).outcome).toBe("rejected");
    expect(fromJsonReply(504, { code: "DEADLINE_EXCEEDED", message: "slow" }).outcome).toBe("failed");
    expect(fromJsonReply(499, { code: "CANCELLED", message: "gone" }).outcome).toBe("cancelled");
    const failed = fromJsonReply(503, {
      code: "UNAVAILABLE",
      message: "the agent could not complete",
      details: { result: record("failed") },
    });
    expect(failed).toMatchObject({ outcome: "failed", code: "UNAVAILABLE", request_id: "req-1" });
    expect(failed.usage).toEqual({ input_tokens: 3, output_tokens: 5 });
  });
});

describe("createAudit", () => {
  it("logs one `audit` line without the request's words and counts it", async () => {
    const lines: [string, string, Record<string, unknown> | undefined][] = [];
    const metrics = new Metrics({ processMetrics: false });
    const audit = createAudit((level, msg, fields) => lines.push([level, msg, fields]), metrics);
    audit({
      http_request_id: "http-1",
      request_id: "req-1",
      namespace: "team",
      session: "chat",
      outcome: "succeeded",
      usage: { input_tokens: 3, output_tokens: 5 },
      stream: true,
      duration_ms: 1234.5,
    });
    expect(lines).toEqual([
      [
        "info",
        "audit",
        {
          http_request_id: "http-1",
          request_id: "req-1",
          namespace: "team",
          session: "chat",
          outcome: "succeeded",
          input_tokens: 3,
          output_tokens: 5,
          stream: true,
          duration_ms: 1235,
        },
      ],
    ]);
    expect(await metrics.render()).toContain('agent_sessions_proxied_requests_total{outcome="succeeded"} 1');
  });
});
