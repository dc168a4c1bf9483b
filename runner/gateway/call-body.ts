/**
 * What a call's JSON body asks of the provider, checked against the Agent's grant before it goes:
 * the model named (`spec.model.allowedModels`), and, for a streamed call, the usage chunk the
 * gateway needs (OpenAI's `stream_options.include_usage`) asked for when the client did not.
 */
import type { GatewayGrant } from "../../contracts/runner-protocol.ts";

export type CheckedCall =
  | {
      ok: true;
      /** What to send the provider (the client's bytes, unless the gateway had to change them). */
      body: Buffer;
      /** The model the call names, if any. */
      model: string | undefined;
      /** The gateway asked for the usage chunk: the client must not get it. */
      stripUsage: boolean;
    }
  | { ok: false; status: 400 | 403; code: "invalid_body" | "model_not_allowed"; message: string };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function parseObject(body: Buffer): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(body.toString("utf8"));
    return isRecord(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where `stream_options.include_usage` is understood: OpenAI's Chat Completions and (legacy)
 * Completions. Other APIs stream their usage unasked (Responses, Anthropic Messages) and may
 * refuse a field they do not know, so their bodies are left alone.
 */
const ASKS_FOR_USAGE = /\/(chat\/)?completions$/;

/** `path`: the call's path (no query), to tell the API apart. */
export function checkCall(body: Buffer, grant: GatewayGrant, path: string): CheckedCall {
  const json = body.length > 0 ? parseObject(body) : undefined;
  const model = typeof json?.model === "string" ? json.model : undefined;
  let rewrite = false;
  if (grant.models) {
    if (body.length > 0 && json === undefined)
      return {
        ok: false,
        status: 400,
        code: "invalid_body",
        message: `Agent ${grant.agent} may use only some models, and the gateway reads a call's model from its JSON body: this body is not a JSON object.`,
      };
    if (json !== undefined && (model === undefined || !grant.models.includes(model)))
      return {
        ok: false,
        status: 403,
        code: "model_not_allowed",
        message:
          `Agent ${grant.agent} may not use ${model === undefined ? "a call that names no model" : `model "${model}"`}; ` +
          `its allowed models: ${grant.models.join(", ")}.`,
      };
    // Re-serialized: the provider reads the very model checked here (never a second `model` key).
    rewrite = true;
  }
  let stripUsage = false;
  if (json?.stream === true && ASKS_FOR_USAGE.test(path)) {
    const options = isRecord(json.stream_options) ? json.stream_options : {};
    if (options.include_usage !== true) {
      // The usage comes only when asked for; the client did not ask, so it never sees the answer.
      json.stream_options = { ...options, include_usage: true };
      stripUsage = true;
      rewrite = true;
    }
  }
  return {
    ok: true,
    body: rewrite && json !== undefined ? Buffer.from(JSON.stringify(json)) : body,
    model,
    stripUsage,
  };
}
