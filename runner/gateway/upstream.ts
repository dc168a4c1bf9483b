/**
 * What the model path and the MCP path of the gateway share on their way to an upstream: a bounded
 * read of the client's body, one keep-alive pool per upstream origin, and the wait for a client's
 * socket to take more of an answer.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Pool } from "undici";

/**
 * The request body, or "too large" past `maxBytes`: the rest is read and dropped (the socket is
 * not destroyed), so the client still gets its 413. A client gone before its body ended rejects.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | "too large"> {
  return new Promise((resolve, reject) => {
    const pieces: Buffer[] = [];
    let bytes = 0;
    const onData = (piece: Buffer) => {
      bytes += piece.length;
      if (bytes <= maxBytes) return void pieces.push(piece);
      req.off("data", onData);
      req.off("end", onEnd);
      req.resume();
      pieces.length = 0;
      resolve("too large");
    };
    const onEnd = () => resolve(pieces.length === 1 ? (pieces[0] as Buffer) : Buffer.concat(pieces));
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", reject);
    // Settled, so nothing waits for a client that went away.
    req.once("close", () => {
      if (!req.complete) reject(new Error("the client went away before its request ended"));
    });
  });
}

/** A keep-alive pool per upstream origin, made on first use; `close` destroys them all. */
export class OriginPools {
  readonly #pools = new Map<string, Pool>();

  get(origin: string): Pool {
    let pool = this.#pools.get(origin);
    if (!pool) {
      pool = new Pool(origin, { keepAliveTimeout: 30_000, pipelining: 1 });
      this.#pools.set(origin, pool);
    }
    return pool;
  }

  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((pool) => pool.destroy()));
  }
}

/** Settles when `res` can take more (drain) or its client has gone (close), whichever is first. */
export function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}
