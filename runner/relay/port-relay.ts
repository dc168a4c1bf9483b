/**
 * Relays a session's declared ports (issue 40; contracts/session-ports.ts): one HTTP request
 * (`port_request`) or one WebSocket (`port_socket`) from the server to a port of the workload, at
 * the workload's own address (the host of the endpoint the runner reaches the adapter at: the
 * container on its session network, the Service on Kubernetes). Never the adapter's port, nor the
 * runtime's session port, nor a port the workspace was not provisioned with (when this runner
 * provisioned it: a runner restarted since knows only the adapter's, and the server sends
 * declared ports only). Redirects are never followed (undici's `request` does not).
 */
import { request } from "undici";
import WebSocket from "ws";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { CodedError } from "../../contracts/errors.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import {
  PORT_SOCKET_MESSAGE_MAX_BYTES,
  type PortHeaders,
  passedHeaders,
} from "../../contracts/session-ports.ts";

type PortRequest = Extract<RunnerCommand, { kind: "port_request" }>;
type PortSocket = Extract<RunnerCommand, { kind: "port_socket" }>;

/** Where the relay sends what it reads: the head, then body bytes or socket messages. */
export type PortSink = {
  head(status: number, headers: PortHeaders): void;
  bytes(data: Buffer, done: boolean): void;
  message(kind: "text" | "binary", data: Buffer): void;
  /** Bytes queued toward the server; the relay pauses above the high-water mark. */
  buffered(): number;
};

const HIGH_WATER_BYTES = 1024 * 1024;

export class PortRelays {
  /** The ports each workspace was provisioned with (by this runner). */
  readonly #declared = new Map<string, Set<number>>();
  readonly #sockets = new Map<string, WebSocket>();

  /** A provision (or a claimed warm entry) tells the workspace's declared ports. */
  declare(containerName: string, ports: readonly { port: number }[] | undefined): void {
    this.#declared.set(containerName, new Set((ports ?? []).map((p) => p.port)));
  }

  forget(containerName: string): void {
    this.#declared.delete(containerName);
  }

  /** The port's address, or PERMISSION_DENIED for the adapter's or an undeclared one. */
  target(containerName: string, endpoint: string, port: number): string {
    const colon = endpoint.lastIndexOf(":");
    const host = endpoint.slice(0, colon);
    const adapterPort = Number(endpoint.slice(colon + 1));
    if (port === adapterPort || port === ADAPTER_PORT)
      throw new CodedError("PERMISSION_DENIED", `port ${port} is the session's adapter port: never relayed`);
    const declared = this.#declared.get(containerName);
    if (declared && !declared.has(port))
      throw new CodedError(
        "PERMISSION_DENIED",
        `port ${port} is not declared by workspace ${containerName} (spec.ports)`,
      );
    return `${host}:${port}`;
  }

  async request(
    address: string,
    command: PortRequest,
    sink: PortSink,
    signal: AbortSignal,
  ): Promise<{ status: number }> {
    const controller = new AbortController();
    const abort = () => controller.abort(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    const timer = setTimeout(() => controller.abort(new Error("port request timed out")), command.timeout_ms);
    try {
      const res = await request(`http://${address}${command.path}`, {
        method: command.method as "GET",
        headers: Object.fromEntries(groupHeaders(command.headers)),
        ...(command.body !== undefined ? { body: Buffer.from(command.body, "base64") } : {}),
        signal: controller.signal,
        headersTimeout: command.timeout_ms,
        bodyTimeout: command.timeout_ms,
      }).catch((error: unknown) => {
        throw unreachable(command.port, error);
      });
      sink.head(res.statusCode, passedHeaders(flatHeaders(res.headers)));
      let relayed = 0;
      for await (const piece of res.body) {
        const bytes = piece as Buffer;
        relayed += bytes.byteLength;
        if (relayed > command.reply_max_bytes) {
          controller.abort(new Error("reply too large"));
          throw new CodedError(
            "RESOURCE_EXHAUSTED",
            `the reply of port ${command.port} exceeds ${command.reply_max_bytes} bytes`,
            { limit_bytes: command.reply_max_bytes },
          );
        }
        // Pieces of at most 1 MiB (a binary frame's bound).
        for (let at = 0; at < bytes.length; at += HIGH_WATER_BYTES)
          sink.bytes(bytes.subarray(at, at + HIGH_WATER_BYTES), false);
        while (sink.buffered() > HIGH_WATER_BYTES && !controller.signal.aborted)
          await new Promise((r) => setTimeout(r, 10));
      }
      sink.bytes(Buffer.alloc(0), true);
      return { status: res.statusCode };
    } finally {
      clearTimeout(timer);
      signal.removeEventListener("abort", abort);
    }
  }

  /** Opens the socket and relays the session's messages until it closes; `{code, reason}` then. */
  socket(
    address: string,
    command: PortSocket,
    sink: PortSink,
    signal: AbortSignal,
  ): Promise<{ code?: number; reason?: string }> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://${address}${command.path}`, command.protocols, {
        headers: Object.fromEntries(groupHeaders(command.headers)),
        maxPayload: PORT_SOCKET_MESSAGE_MAX_BYTES,
        followRedirects: false,
        handshakeTimeout: 30_000,
      });
      let opened = false;
      const end = () => {
        this.#sockets.delete(command.relay_id);
        signal.removeEventListener("abort", onAbort);
      };
      const onAbort = () => ws.terminate();
      signal.addEventListener("abort", onAbort, { once: true });
      ws.on("unexpected-response", (_req, res) => {
        end();
        res.resume();
        reject(
          new CodedError(
            "FAILED_PRECONDITION",
            `port ${command.port} refused the WebSocket upgrade with HTTP ${res.statusCode}`,
            { status: res.statusCode },
          ),
        );
        ws.terminate();
      });
      ws.on("open", () => {
        opened = true;
        this.#sockets.set(command.relay_id, ws);
        sink.head(101, ws.protocol ? [["sec-websocket-protocol", ws.protocol]] : []);
      });
      ws.on("message", (data, isBinary) => {
        const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
        sink.message(isBinary ? "binary" : "text", bytes);
      });
      ws.on("error", (error) => {
        if (opened) return; // `close` follows
        end();
        reject(unreachable(command.port, error));
      });
      ws.on("close", (code, reason) => {
        end();
        if (!opened) return;
        sink.bytes(Buffer.alloc(0), true);
        resolve({ code, reason: reason.toString("utf8") });
      });
    });
  }

  /** One message of the client's to an open socket. */
  async send(relayId: string, kind: "text" | "binary", data: Buffer): Promise<void> {
    const ws = this.#sockets.get(relayId);
    if (!ws) throw new CodedError("NOT_FOUND", `no open port socket ${relayId}`);
    await new Promise<void>((resolve, reject) =>
      ws.send(kind === "text" ? data.toString("utf8") : data, { binary: kind === "binary" }, (error) =>
        error ? reject(new CodedError("UNAVAILABLE", `the port socket closed: ${error.message}`)) : resolve(),
      ),
    );
  }

  /** The client closed its side. */
  close(relayId: string, code?: number, reason?: string): boolean {
    const ws = this.#sockets.get(relayId);
    if (!ws) return false;
    // 1005/1006/1015 may not be sent (RFC 6455 §7.4.1): a plain close instead.
    if (code === undefined || code === 1005 || code === 1006 || code === 1015) ws.close();
    else ws.close(code, reason);
    return true;
  }
}

/** Nothing listens, or the workload is gone: UNAVAILABLE, naming the port only. */
function unreachable(port: number, error: unknown): CodedError {
  if (error instanceof CodedError) return error;
  const code = (error as { code?: string }).code;
  return new CodedError(
    "UNAVAILABLE",
    code === "ECONNREFUSED"
      ? `nothing listens on port ${port} in the session`
      : `port ${port} of the session did not answer: ${(error as Error).message ?? String(error)}`,
  );
}

/** undici's header record as pairs. */
function flatHeaders(headers: Record<string, string | string[] | undefined>): [string, string][] {
  const out: [string, string][] = [];
  for (const [key, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) out.push([key, v]);
  }
  return out;
}

/** Pairs as a record, a name given twice joined (RFC 9110 §5.3; set-cookie never comes this way). */
function groupHeaders(headers: PortHeaders): Map<string, string> {
  const out = new Map<string, string>();
  for (const [key, value] of passedHeaders(headers)) {
    const had = out.get(key);
    out.set(key, had === undefined ? value : `${had}, ${value}`);
  }
  return out;
}
