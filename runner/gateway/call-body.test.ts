import { describe, expect, it } from "vitest";
import type { GatewayGrant } from "../../contracts/runner-protocol.ts";
import { checkCall } from "./call-body.ts";

const grant: GatewayGrant = { agent: "default/a", upstream: "http://127.0.0.1:11434/v1" };
const CHAT = "/v1/chat/completions";
const body = (value: unknown) => Buffer.from(JSON.stringify(value));

describe("checkCall", () => {
  it("leaves the client's bytes alone when there is nothing to check or ask", () => {
    const bytes = Buffer.from('{"model":"any",  "messages":[]}');
    expect(checkCall(bytes, grant, CHAT)).toEqual({ ok: true, body: bytes, model: "any", stripUsage: false });
    expect(checkCall(Buffer.alloc(0), { ...grant, models: ["m"] }, CHAT)).toMatchObject({
      ok: true,
      model: undefined,
    });
  });

  it("asks a stream for its usage chunk (the client's other stream options kept), unless the client did", () => {
    const asked = checkCall(body({ model: "m", stream: true, stream_options: { x: 1 } }), grant, CHAT);
    expect(asked.ok && JSON.parse(asked.body.toString())).toEqual({
      model: "m",
      stream: true,
      stream_options: { x: 1, include_usage: true },
    });
    expect(asked).toMatchObject({ stripUsage: true });
    const own = body({ model: "m", stream: true, stream_options: { include_usage: true } });
    expect(checkCall(own, grant, CHAT)).toEqual({ ok: true, body: own, model: "m", stripUsage: false });
  });

  it("leaves a stream of another API alone (Anthropic Messages, OpenAI Responses stream their usage unasked)", () => {
    const streamed = body({ model: "claude", stream: true, messages: [] });
    for (const path of ["/v1/messages", "/v1/responses"])
      expect(checkCall(streamed, grant, path)).toEqual({
        ok: true,
        body: streamed,
        model: "claude",
        stripUsage: false,
      });
  });

  it("refuses a model outside the list, a call naming none, and a body it cannot read", () => {
    const only = { ...grant, models: ["m-1", "m-2"] };
    expect(checkCall(body({ model: "other" }), only, CHAT)).toEqual({
      ok: false,
      status: 403,
      code: "model_not_allowed",
      message: 'Agent default/a may not use model "other"; its allowed models: m-1, m-2.',
    });
    expect(checkCall(body({ messages: [] }), only, CHAT)).toMatchObject({
      ok: false,
      code: "model_not_allowed",
    });
    expect(checkCall(Buffer.from("model=m-1"), only, CHAT)).toMatchObject({ ok: false, status: 400 });
  });

  it("sends the provider the very model it checked (a second `model` key cannot slip past)", () => {
    const checked = checkCall(
      Buffer.from('{"model":"expensive","model":"m-1","messages":[]}'),
      { ...grant, models: ["m-1"] },
      CHAT,
    );
    expect(checked.ok && checked.body.toString()).toBe('{"model":"m-1","messages":[]}');
  });
});
