import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { Context, Hono } from "hono";
import { type RawData, WebSocketServer } from "ws";
import { PORT_ROUTE, PORT_SOCKET_MESSAGE_MAX_BYTES, passedHeaders } from "../../contracts/session-ports.ts";
import type { AdmittedPort, PortRelay } from "../relay/port-relay.ts";

/**
 * A WebSocket to a session's declared port (issue 40). The node server's `upgrade` event never
 * reaches Hono, so `portUpgrade` hands the upgrade request to the app as a plain request carrying
 * the socket in its env: the same authentication, route access (the port scope), request id and
 * access log as HTTP, and the port route's handler (port-routes.ts) completes the handshake with
 * `acceptPortSocket` once the session's port accepted its own. A refusal (401, 403, 404, 412, …)
 * is written back as the HTTP answer, no upgrade.
 */
export type PortUpgrade = {
  request: IncomingMessage;
  socket: Duplex;
  head: Buffer;
  /** Set once the handshake is taken over (the app's answer is then not written). */
  accepted: boolean;
};

/** Whether an upgrade request is for a session's port. */
export function isPortUpgrade(url: string | undefined): boolean {
  return PORT_ROUTE.test((url ?? "").split("?")[0] ?? "");
}

/** The upgrade a request carries, when it came through `portUpgrade`. */
export function upgradeOf(c: Context): PortUpgrade | undefined {
  const env = c.env as { portUpgrade?: PortUpgrade } | undefined;
  return env?.portUpgrade;
}

/** The node server's `upgrade` handler for port paths. */
export function portUpgrade(app: Hono): (request: IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (request, socket, head) => {
    const headers = new Headers();
    for (const [key, value] of Object.entries(request.headers)) {
      if (typeof value === "string") headers.set(key, value);
      else if (Array.isArray(value)) for (const v of value) headers.append(key, v);
    }
    const upgrade: PortUpgrade = { request, socket, head, accepted: false };
    const url = `http://${request.headers.host ?? "localhost"}${request.url ?? "/"}`;
    Promise.resolve(
      app.fetch(new Request(url, { method: request.method ?? "GET", headers }), { portUpgrade: upgrade }),
    )
      .then(async (response) => {
        if (upgrade.accepted || socket.destroyed) return;
        const body = Buffer.from(await response.arrayBuffer());
        const lines = [`HTTP/1.1 ${response.status} ${response.statusText || "Refused"}`];
        response.headers.forEach((value, key) => {
          if (key !== "content-length" && key !== "connection") lines.push(`${key}: ${value}`);
        });
        lines.push(`content-length: ${body.length}`, "connection: close", "", "");
        socket.end(Buffer.concat([Buffer.from(lines.join("\r\n")), body]));
      })
      .catch(() => socket.destroy());
  };
}

/**
 * Opens the session's socket through the runner, then completes the client's handshake with the
 * subprotocol the session chose. Messages flow both ways, one at a time each way; either side's
 * close closes the other. Resolves with how it ended (for the audit).
 */
export async function acceptPortSocket(
  relay: PortRelay,
  admitted: AdmittedPort,
  port: number,
  path: string,
  upgrade: PortUpgrade,
): Promise<{ ended: Promise<"succeeded" | "failed"> }> {
  const { request } = upgrade;
  const protocols = String(request.headers["sec-websocket-protocol"] ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p !== "");
  const headerPairs: [string, string][] = [];
  for (const [key, value] of Object.entries(request.headers))
    if (typeof value === "string" && key !== "sec-websocket-protocol") headerPairs.push([key, value]);
  // What comes from the session before the client's end is ready waits here (in order).
  const early: { kind: "text" | "binary"; data: Buffer }[] = [];
  let client: import("ws").WebSocket | undefined;
  let endedBySession: { code: number | undefined; reason: string | undefined } | undefined;
  let resolveEnded: (outcome: "succeeded" | "failed") => void = () => {};
  const ended = new Promise<"succeeded" | "failed">((resolve) => {
    resolveEnded = resolve;
  });
  const session = await relay.socket(
    admitted,
    port,
    { path, headers: passedHeaders(headerPairs), protocols },
    {
      message: (kind, data) => {
        if (client)
          client.send(kind === "text" ? data.toString("utf8") : data, { binary: kind === "binary" });
        else early.push({ kind, data });
      },
      closed: (code, reason) => {
        endedBySession = { code, reason };
        resolveEnded(code === 1011 ? "failed" : "succeeded");
        if (client) closeClient(client, code, reason);
      },
    },
  );
  upgrade.accepted = true;
  // The subprotocol is the one the session chose (from those the client offered).
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: PORT_SOCKET_MESSAGE_MAX_BYTES,
    handleProtocols: () => session.protocol ?? false,
  });
  // A client handshake ws refuses (a malformed upgrade: it answers 400 itself) never calls back:
  // the session's socket is not left open for it.
  const abandoned = setTimeout(() => {
    if (!client) session.close(1001, "the client's handshake failed");
  }, 10_000);
  wss.handleUpgrade(request, upgrade.socket, upgrade.head, (ws) => {
    clearTimeout(abandoned);
    client = ws;
    for (const m of early.splice(0))
      ws.send(m.kind === "text" ? m.data.toString("utf8") : m.data, { binary: m.kind === "binary" });
    if (endedBySession) closeClient(ws, endedBySession.code, endedBySession.reason);
    ws.on("message", (data: RawData, isBinary: boolean) => {
      const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      session.send(isBinary ? "binary" : "text", bytes).catch(() => ws.terminate());
    });
    ws.on("close", (code, reason) => {
      if (!endedBySession) session.close(code, reason.toString("utf8"));
    });
    ws.on("error", () => ws.terminate());
  });
  return { ended };
}

function closeClient(ws: import("ws").WebSocket, code: number | undefined, reason: string | undefined): void {
  if (code === undefined || code === 1005 || code === 1006 || code === 1015 || code < 1000 || code > 4999)
    ws.close();
  else ws.close(code, reason?.slice(0, 123));
}
