import { randomBytes, randomUUID } from "node:crypto";
import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { PORT_REQUEST_BODY_MAX_BYTES, type PortHeaders } from "../../contracts/session-ports.ts";
import type { AutoResumer } from "../harness/auto-resumer.ts";
import type { BoundedCaller, CallerBounds } from "../lifecycle/caller-bounds.ts";
import type { NamespaceBounds } from "../lifecycle/namespace-bounds.ts";
import { readyOf } from "../harness/harness-status.ts";
import { chunkBytes, type CommandOutcome, type RelayChunk } from "../lifecycle/runner-directory.ts";
import type { Logger } from "../observability/log.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";
import type { RelayLink } from "./request-relay.ts";

export type PortRelayOptions = {
  harness: HarnessStore;
  store: Store;
  runners: RelayLink;
  log: Logger;
  /** Deadline of one HTTP request to a port (AGENT_SESSIONS_REQUEST_TIMEOUT_MS). */
  timeoutMs: number;
  /** Largest reply relayed (AGENT_SESSIONS_REPLY_MAX_BYTES). */
  replyMaxBytes: number;
  /** How long a port's WebSocket may stay open. @default 1 h */
  socketMaxMs?: number;
  /** Wakes a Paused session and auto-resumes an idle-stopped one with spec.autoResume. */
  autoResume?: AutoResumer | undefined;
  /** Requests in flight per token and per namespace, shared with the request relay. @default unbounded */
  perToken?: CallerBounds | undefined;
  perNamespace?: NamespaceBounds | undefined;
  /** @default () => new Date() */
  now?: () => Date;
};

/** Where a port's traffic goes, once admitted: settle it exactly once with `finish`. */
export type AdmittedPort = {
  record: HarnessRecord;
  runnerId: string;
  containerName: string;
  requestId: string;
  relayId: string;
  finish(outcome: "succeeded" | "failed" | "cancelled"): Promise<void>;
};

/** What a socket's server end needs: the session's messages and its end. */
export type PortSocketPeer = {
  message(kind: "text" | "binary", data: Buffer): void;
  closed(code: number | undefined, reason: string | undefined): void;
};

const DEFAULT_SOCKET_MAX_MS = 3_600_000;

/** The policy every port reply carries: its own opaque origin, scripts and forms allowed. */
export const PORT_REPLY_SANDBOX =
  "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";
const SOCKET_COMMAND_TIMEOUT_MS = 30_000;

/**
 * A session's declared ports (issue 40; contracts/session-ports.ts), relayed client → server →
 * runner (`port_request`, `port_socket`) → the workload, the reply back as the runner's
 * `relay_chunk`s. Only a port the session declares (`spec.ports`) is relayed (else NOT_FOUND,
 * nothing sent); the runner refuses the adapter's and undeclared ones again. Port traffic is a
 * request of the session: admitted only when it is Ready (a Paused one is woken, an idle-stopped
 * one with spec.autoResume resumed first), counted (requestCount, lastActivityTime; an open
 * socket holds it awake like a request in flight) and audited (`request_id` `port-<port>-…`).
 */
export class PortRelay {
  readonly #o: Required<Omit<PortRelayOptions, "autoResume" | "perToken" | "perNamespace">> &
    Pick<PortRelayOptions, "autoResume" | "perToken" | "perNamespace">;

  constructor(options: PortRelayOptions) {
    this.#o = { socketMaxMs: DEFAULT_SOCKET_MAX_MS, now: () => new Date(), ...options };
  }

  /** The session and its declared port, or NOT_FOUND (nothing is sent for an undeclared port). */
  async declared(
    namespace: string,
    name: string,
    rawPort: string,
  ): Promise<{ record: HarnessRecord; port: number }> {
    const port = /^[1-9][0-9]{0,4}$/.test(rawPort) ? Number(rawPort) : Number.NaN;
    if (!(port >= 1 && port <= 65535))
      throw new CodedError(
        "INVALID_ARGUMENT",
        `port must be a number from 1024 to 65535, got ${JSON.stringify(rawPort)}`,
        {
          field_violations: [{ field: "port", description: "must be a port number" }],
        },
      );
    const record = await this.#o.harness.getHarnessSession(namespace, name);
    if (!record) throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
    if (!record.spec.ports?.some((p) => p.port === port))
      throw new CodedError(
        "NOT_FOUND",
        `port ${port} is not declared by ${HARNESS_SESSION_KIND} ${namespace}/${name} (spec.ports${
          record.spec.ports?.length ? `: ${record.spec.ports.map((p) => p.port).join(", ")}` : " is empty"
        }); only declared ports are reachable`,
        { port },
      );
    return { record, port };
  }

  /** Ready (woken or resumed first when it may be), counted as a request in flight. */
  async admit(
    record: HarnessRecord,
    port: number,
    signal: AbortSignal,
    caller?: BoundedCaller | undefined,
  ): Promise<AdmittedPort> {
    const requestId = `port-${port}-${randomBytes(6).toString("hex")}`;
    let current = record;
    let release: (() => void) | undefined;
    // The token's and the namespace's slots, held until the traffic is settled (429 past them).
    const releaseToken = this.#o.perToken?.acquire(caller) ?? (() => {});
    let releaseSlots = releaseToken;
    let admitted = false;
    try {
      const releaseNamespace = this.#o.perNamespace?.acquire(caller, [record.namespace]) ?? (() => {});
      releaseSlots = () => {
        releaseNamespace();
        releaseToken();
      };
      if (current.phase !== "Ready" && this.#o.autoResume) {
        const awake = await this.#o.autoResume.awaitReady(current, requestId, signal);
        if (awake) {
          current = awake.record;
          release = awake.release;
        }
      }
      const { namespace, name } = current;
      const workspace =
        current.container_name === undefined
          ? undefined
          : await this.#o.store.getWorkspace(current.container_name);
      if (!workspace || current.phase !== "Ready") throw notReady(current);
      const relayId = randomUUID();
      const begun = await this.#o.harness.beginRequest({
        namespace,
        name,
        request_id: requestId,
        relay_id: relayId,
        runner_id: workspace.runner_id,
        container_name: workspace.container_name,
        now: this.#now(),
      });
      if (!begun.ok) {
        if (begun.reason === "not-ready") throw notReady(begun.session);
        throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
      }
      let settled = false;
      admitted = true;
      return {
        record: current,
        runnerId: workspace.runner_id,
        containerName: workspace.container_name,
        requestId,
        relayId,
        finish: async (outcome) => {
          if (settled) return;
          settled = true;
          releaseSlots();
          await this.#o.harness
            .finishRequest({
              namespace,
              name,
              request_id: requestId,
              outcome,
              usage: "unavailable",
              now: this.#now(),
            })
            .catch((error: unknown) =>
              this.#o.log("warn", "port request not settled", {
                namespace,
                name,
                request_id: requestId,
                error: String(error),
              }),
            );
        },
      };
    } finally {
      release?.();
      if (!admitted) releaseSlots();
    }
  }

  /**
   * One HTTP request to the port: the body read whole (bounded), the reply streamed back as it
   * comes. The Response carries the session's status and headers (hop-by-hop ones dropped).
   */
  async http(
    admitted: AdmittedPort,
    port: number,
    request: {
      method: string;
      path: string;
      headers: PortHeaders;
      body: Buffer | undefined;
      signal: AbortSignal;
    },
  ): Promise<{ response: Response; settled: Promise<"succeeded" | "failed" | "cancelled"> }> {
    const { relayId } = admitted;
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let ended = false;
    let clientGone = false;
    const body = new ReadableStream<Uint8Array>(
      {
        start: (ctl) => {
          controller = ctl;
        },
        cancel: () => {
          ended = true;
          clientGone = true;
        },
      },
      { highWaterMark: 0 },
    );
    let onHead: (head: { status: number; headers: PortHeaders }) => void = () => {};
    let headSeen = false;
    const head = new Promise<{ status: number; headers: PortHeaders }>((resolve) => {
      onHead = (h) => {
        headSeen = true;
        resolve(h);
      };
    });
    const unsubscribe = this.#o.runners.onRelayChunk(relayId, (chunk: RelayChunk) => {
      if (chunk.status !== undefined) {
        onHead({ status: chunk.status, headers: chunk.headers ?? [] });
        return;
      }
      if (ended) return;
      try {
        const bytes = chunkBytes(chunk);
        if (bytes.length > 0) controller.enqueue(bytes);
        if (chunk.done) {
          ended = true;
          controller.close();
        }
      } catch {
        ended = true;
      }
    });
    const command: RunnerCommand = {
      kind: "port_request",
      container_name: admitted.containerName,
      port,
      relay_id: relayId,
      method: request.method,
      path: request.path,
      headers: request.headers,
      ...(request.body !== undefined && request.body.length > 0
        ? { body: request.body.toString("base64") }
        : {}),
      timeout_ms: this.#o.timeoutMs,
      reply_max_bytes: this.#o.replyMaxBytes,
    };
    const outcome: Promise<CommandOutcome<typeof command>> = this.#o.runners
      .command(admitted.runnerId, command, this.#o.timeoutMs + 1_000)
      .finally(unsubscribe);
    const onAbort = () => {
      clientGone = true;
    };
    request.signal.addEventListener("abort", onAbort, { once: true });
    const first = await Promise.race([head, outcome]);
    if ("ok" in first) {
      if (!first.ok) {
        await admitted.finish("failed");
        throw new CodedError(first.error.code, `port ${port}: ${first.error.message}`, first.error.details);
      }
      // The head always comes before the result on one link: a runner that answered without one
      // is out of protocol.
      if (!headSeen) {
        await admitted.finish("failed");
        throw new CodedError("INTERNAL", `port ${port}: the runner answered without the reply's status`);
      }
    }
    const settled = outcome.then(async (o) => {
      request.signal.removeEventListener("abort", onAbort);
      if (!ended) {
        ended = true;
        try {
          if (!o.ok) controller.error(new Error(o.error.message));
          else controller.close();
        } catch {
          // the reader went away first
        }
      }
      const result = clientGone && !o.ok ? "cancelled" : o.ok ? "succeeded" : "failed";
      await admitted.finish(result);
      return result;
    });
    const { status, headers } = "ok" in first ? await head : first;
    const out = new Headers();
    for (const [key, value] of headers) if (key !== "set-cookie") out.append(key, value);
    // The session's page is served from the API's origin: a sandbox without allow-same-origin
    // makes it an opaque origin of its own (W3C CSP3 `sandbox`, HTML's iframe sandbox flags), so
    // its scripts can never read what the origin keeps (the web UI's token) nor call the API as
    // it. Both this and a policy of the session's own are enforced. Its cookies are dropped: the
    // origin is not the session's to set them on.
    out.append("content-security-policy", PORT_REPLY_SANDBOX);
    // A body-less status cannot carry one (fetch's Response refuses it).
    const bodyless = status === 204 || status === 304 || request.method === "HEAD";
    if (bodyless) void body.cancel().catch(() => undefined);
    return { response: new Response(bodyless ? null : body, { status, headers: out }), settled };
  }

  /**
   * Opens the port's WebSocket through the runner: resolves once the session accepted the
   * upgrade (with the subprotocol it chose), rejects with its refusal. `peer` hears the session's
   * messages and its close; `send` and `close` go the other way. The socket stays open at most
   * socketMaxMs.
   */
  async socket(
    admitted: AdmittedPort,
    port: number,
    open: { path: string; headers: PortHeaders; protocols: string[] },
    peer: PortSocketPeer,
  ): Promise<{
    protocol: string | undefined;
    send(kind: "text" | "binary", data: Buffer): Promise<void>;
    close(code?: number, reason?: string): void;
  }> {
    const { relayId, runnerId } = admitted;
    let onOpen: (protocol: string | undefined) => void = () => {};
    const opened = new Promise<string | undefined>((resolve) => {
      onOpen = resolve;
    });
    const unsubscribe = this.#o.runners.onRelayChunk(relayId, (chunk: RelayChunk) => {
      if (chunk.status === 101) {
        onOpen(chunk.headers?.find(([k]) => k === "sec-websocket-protocol")?.[1]);
        return;
      }
      if (chunk.message !== undefined) peer.message(chunk.message, Buffer.from(chunk.data, "base64"));
    });
    const outcome = this.#o.runners
      .command(
        runnerId,
        {
          kind: "port_socket",
          container_name: admitted.containerName,
          port,
          relay_id: relayId,
          path: open.path,
          headers: open.headers,
          protocols: open.protocols,
        },
        this.#o.socketMaxMs,
      )
      .finally(unsubscribe);
    void outcome.then(async (o) => {
      peer.closed(o.ok ? o.result.code : 1011, o.ok ? o.result.reason : o.error.message.slice(0, 120));
      await admitted.finish(o.ok ? "succeeded" : "failed");
    });
    const first = await Promise.race([opened.then((protocol) => ({ protocol })), outcome]);
    if ("ok" in first) {
      if (first.ok) throw new CodedError("UNAVAILABLE", `port ${port} closed the WebSocket before it opened`);
      throw new CodedError(first.error.code, `port ${port}: ${first.error.message}`, first.error.details);
    }
    // Messages go one after another, in order.
    let queue = Promise.resolve();
    return {
      protocol: first.protocol,
      send: (kind, data) => {
        const sent = queue.then(async () => {
          const r = await this.#o.runners.command(
            runnerId,
            { kind: "port_socket_send", relay_id: relayId, message: kind, data: data.toString("base64") },
            SOCKET_COMMAND_TIMEOUT_MS,
          );
          if (!r.ok) throw new CodedError(r.error.code, r.error.message);
        });
        queue = sent.catch(() => undefined);
        return sent;
      },
      close: (code, reason) => {
        void queue.then(() =>
          this.#o.runners.command(
            runnerId,
            {
              kind: "port_socket_close",
              relay_id: relayId,
              ...(code !== undefined && code >= 1000 && code <= 4999 ? { code } : {}),
              ...(reason ? { reason: reason.slice(0, 123) } : {}),
            },
            SOCKET_COMMAND_TIMEOUT_MS,
          ),
        );
      },
    };
  }

  /** The request body, or undefined past PORT_REQUEST_BODY_MAX_BYTES (reading stops there). */
  static async readBody(request: Request): Promise<Buffer | "too-large"> {
    const max = PORT_REQUEST_BODY_MAX_BYTES;
    const declared = Number(request.headers.get("content-length") ?? Number.NaN);
    if (declared > max) return "too-large";
    if (!request.body) return Buffer.alloc(0);
    const reader = request.body.getReader();
    const chunks: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > max) {
        await reader.cancel().catch(() => undefined);
        return "too-large";
      }
      chunks.push(value);
    }
    return Buffer.concat(chunks);
  }

  #now(): string {
    return this.#o.now().toISOString();
  }
}

function notReady(record: Pick<HarnessRecord, "namespace" | "name" | "phase" | "conditions">): CodedError {
  const ready = readyOf(record.conditions);
  return new CodedError(
    "FAILED_PRECONDITION",
    `${HARNESS_SESSION_KIND} ${record.namespace}/${record.name} is not Ready (phase ${record.phase}${
      ready ? `, reason ${ready.reason}` : ""
    }); its ports are reachable while it is Ready (spec.autoResume resumes it when stopped for idleness)`,
    { phase: record.phase, ...(ready ? { reason: ready.reason } : {}) },
  );
}
