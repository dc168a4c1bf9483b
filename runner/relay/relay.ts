/**
 * Relays one client request down to the session's v1alpha2 adapter (undici; redirects are never
 * followed: undici's `request` does not follow them) and the reply back up as `relay_chunk`
 * messages: the first carries the adapter's HTTP status. While the link's send buffer is above a
 * high-water mark, the adapter's body is not read (backpressure reaches the adapter). A reply past
 * its bound (the server's reply limit) is cut off: the relay ends RESOURCE_EXHAUSTED.
 */
import { StringDecoder } from "node:string_decoder";
import { request } from "undici";
import { CodedError } from "../../contracts/errors.ts";
import { OpenAIChatReply, openAIChatRequest } from "./openai-chat-exchange.ts";

/**
 * Where a relay goes: the adapter's endpoint and token, and, for a harness of the `openai-chat`
 * session contract (issue 41), that protocol (openai-chat-exchange.ts translates both ways).
 */
export type RelayTarget = { endpoint: string; token: string; protocol?: "openai-chat" | undefined };
export type RelayRequest = { id: string; input: string; stream: boolean };
export type ChunkSink = {
  chunk(data: string, done: boolean, status?: number): void;
  /** Bytes queued toward the server; the relay pauses above the high-water mark. */
  buffered(): number;
};

const HIGH_WATER_BYTES = 1024 * 1024;
/** A relay without a bound of its own (an older server) still stops here. */
const DEFAULT_REPLY_MAX_BYTES = 64 * 1024 * 1024;

export class Relays {
  readonly #inflight = new Map<
    string,
    { controller: AbortController; target: RelayTarget; requestId: string }
  >();

  async relay(
    relayId: string,
    target: RelayTarget,
    req: RelayRequest,
    timeoutMs: number,
    sink: ChunkSink,
    replyMaxBytes = DEFAULT_REPLY_MAX_BYTES,
  ): Promise<{ status: number }> {
    const controller = new AbortController();
    this.#inflight.set(relayId, { controller, target, requestId: req.id });
    const timer = setTimeout(() => controller.abort(new Error("relay timed out")), timeoutMs);
    try {
      const exchange = target.protocol === "openai-chat" ? new OpenAIChatReply(req) : undefined;
      const { path, body } = exchange
        ? openAIChatRequest(req)
        : { path: "/v1/requests", body: JSON.stringify(req) };
      const res = await request(`http://${target.endpoint}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${target.token}` },
        body,
        signal: controller.signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      let first = true;
      let relayed = 0;
      // A whole (non-streamed) reply is read to its end anyway by the server: its last piece
      // leaves with `done` (one message for the usual one-piece reply, not two). A streamed one
      // goes piece by piece as it comes.
      let held: string | undefined;
      // A character split between two pieces is decoded whole, in the later one.
      const decoder = new StringDecoder("utf8");
      const status = exchange ? exchange.status(res.statusCode) : res.statusCode;
      const send = (data: string, done: boolean) => {
        if (data === "" && !done && !first) return;
        sink.chunk(data, done, first ? status : undefined);
        first = false;
      };
      for await (const piece of res.body) {
        relayed += (piece as Uint8Array).byteLength;
        if (relayed > replyMaxBytes) {
          controller.abort(new Error("reply too large"));
          throw new CodedError(
            "RESOURCE_EXHAUSTED",
            `the adapter's reply (HTTP ${res.statusCode}) exceeds ${replyMaxBytes} bytes`,
            { limit_bytes: replyMaxBytes },
          );
        }
        const decoded = decoder.write(piece as Buffer);
        const text = exchange ? exchange.piece(decoded) : decoded;
        if (req.stream) send(text, false);
        else {
          if (held !== undefined) send(held, false);
          held = text;
        }
        while (sink.buffered() > HIGH_WATER_BYTES && !controller.signal.aborted)
          await new Promise((r) => setTimeout(r, 10));
      }
      const tail = decoder.end();
      send((held ?? "") + (exchange ? exchange.piece(tail) + exchange.end() : tail), true);
      return { status };
    } finally {
      clearTimeout(timer);
      this.#inflight.delete(relayId);
    }
  }

  /** Cancels one in-flight relay: tells the adapter, then drops the connection. */
  async cancel(relayId: string): Promise<boolean> {
    const r = this.#inflight.get(relayId);
    if (!r) return false;
    // The openai-chat contract has no cancel of its own: dropping the connection is all there is.
    if (r.target.protocol !== "openai-chat")
      await request(`http://${r.target.endpoint}/v1/requests/${encodeURIComponent(r.requestId)}/cancel`, {
        method: "POST",
        headers: { authorization: `Bearer ${r.target.token}` },
        headersTimeout: 5000,
        bodyTimeout: 5000,
      })
        .then((res) => res.body.dump())
        .catch(() => undefined);
    r.controller.abort(new Error("cancelled"));
    return true;
  }
}
