/**
 * A TCP relay in the test process: what connects to `host:port` is piped to `target`. Tests use
 * it to let pods reach a loopback-only service of the test bed (the PostgreSQL database) on the
 * address sessions reach the host at, for as long as the test runs.
 */
import net from "node:net";

export type TcpRelay = { host: string; port: number; close(): Promise<void> };

/** Listens on the first free port of `ports` (0: any) on `host`. */
export async function startTcpRelay(
  host: string,
  ports: number[],
  target: { host: string; port: number },
): Promise<TcpRelay> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    const outbound = net.connect(target.port, target.host);
    for (const socket of [inbound, outbound]) {
      // A peer that vanished without a FIN (a deleted pod's network) is found by keepalive, and
      // its end goes through to the target, as it would without the relay.
      socket.setKeepAlive(true, 1_000);
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
      socket.on("error", () => {
        inbound.destroy();
        outbound.destroy();
      });
    }
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  let last: unknown;
  for (const port of ports) {
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          resolve();
        });
      });
      const address = server.address() as net.AddressInfo;
      return {
        host,
        port: address.port,
        close: () =>
          new Promise<void>((resolve) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => resolve());
          }),
      };
    } catch (error) {
      if ((error as { code?: string }).code !== "EADDRINUSE") throw error;
      last = error;
    }
  }
  throw new Error(`no free relay port on ${host}: ${String(last)}`);
}
