import type { LookupAddress } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP, type LookupFunction } from "node:net";
import type { WebhookEgress } from "./webhook-egress.ts";

/** One attempt's answer: a 2xx, or the status or error that makes it a failure (values, never thrown). */
export type AttemptResult =
  | { ok: true; statusCode: number }
  | { ok: false; statusCode?: number; error?: string };

/** Posts one signed delivery; never throws. */
export type SendWebhook = (
  url: string,
  headers: Record<string, string>,
  body: string,
) => Promise<AttemptResult>;

/** Bytes of a receiver's answer read at most (then the socket is closed): the answer is not kept. */
const ANSWER_MAX_BYTES = 64 * 1024;

/**
 * POSTs over node:http(s) to addresses the webhook egress guard allowed, pinned: the socket's
 * lookup answers the addresses checked, so DNS cannot send it elsewhere after the check. No
 * redirects are followed (a 3xx is a failure: a redirect could point anywhere). Each attempt ends
 * within `timeoutMs`, answer included.
 */
export function webhookSender(egress: WebhookEgress, timeoutMs: number): SendWebhook {
  return async (url, headers, body) => {
    const target = new URL(url);
    const checked = await egress.resolve(target.hostname);
    if (!checked.ok) return { ok: false, error: `refused by the webhook egress guard: ${checked.why}` };
    const request = target.protocol === "https:" ? httpsRequest : httpRequest;
    return new Promise<AttemptResult>((resolve) => {
      let settled = false;
      const done = (result: AttemptResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      const req = request(
        target,
        {
          method: "POST",
          headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
          lookup: pinnedLookup(checked.addresses),
          // SNI names a host, never an address (RFC 6066 §3).
          ...(target.protocol === "https:" && isIP(target.hostname) === 0
            ? { servername: target.hostname }
            : {}),
        },
        (res: IncomingMessage) => {
          let read = 0;
          res.on("data", (chunk: Buffer) => {
            read += chunk.length;
            if (read > ANSWER_MAX_BYTES) res.destroy();
          });
          const status = res.statusCode ?? 0;
          const answer = (): AttemptResult =>
            status >= 200 && status < 300
              ? { ok: true, statusCode: status }
              : { ok: false, statusCode: status };
          res.on("end", () => done(answer()));
          res.on("close", () => done(answer()));
          res.on("error", () => done(answer()));
        },
      );
      const timer = setTimeout(() => {
        done({ ok: false, error: `no answer within ${timeoutMs} ms` });
        req.destroy();
      }, timeoutMs);
      req.on("error", (error: NodeJS.ErrnoException) =>
        done({ ok: false, error: error.code ? `${error.code}: ${error.message}` : error.message }),
      );
      req.end(body);
    });
  };
}

/** A lookup answering only `addresses` (those the guard checked). */
function pinnedLookup(addresses: readonly LookupAddress[]): LookupFunction {
  return (_hostname, options, callback) => {
    const wanted = options.family === 4 || options.family === 6 ? options.family : undefined;
    const usable = wanted ? addresses.filter((a) => a.family === wanted) : [...addresses];
    if (options.all) {
      (callback as unknown as (error: null, all: LookupAddress[]) => void)(null, usable);
      return;
    }
    const first = usable[0];
    if (first) callback(null, first.address, first.family);
    else
      callback(Object.assign(new Error("no allowed address of that family"), { code: "ENOTFOUND" }), "", 0);
  };
}
