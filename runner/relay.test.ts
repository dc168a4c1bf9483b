import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Relays } from "./relay.ts";

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  server = undefined;
});

/** An adapter that answers `status` and writes its body forever (until the connection goes). */
async function endlessAdapter(status: number): Promise<string> {
  server = createServer((_req, res) => {
    res.writeHead(status, { "content-type": "application/json" });
    const piece = Buffer.alloc(16 * 1024, 0x65);
    const pump = () => {
      while (!res.destroyed && res.write(piece));
      if (!res.destroyed) res.once("drain", pump);
    };
    pump();
  });
  await new Promise<void>((r) => server?.listen(0, "127.0.0.1", r));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("the runner's relay to an adapter", () => {
  it("cuts off a reply past its bound with RESOURCE_EXHAUSTED, having relayed no more than the bound", async () => {
    const endpoint = await endlessAdapter(500);
    let relayed = 0;
    const statuses: (number | undefined)[] = [];
    const relay = new Relays().relay(
      "relay-1",
      { endpoint, token: "t" },
      { id: "r1", input: "x", stream: true },
      10_000,
      {
        chunk: (data, _done, status) => {
          relayed += Buffer.byteLength(data);
          statuses.push(status);
        },
        buffered: () => 0,
      },
      100_000,
    );
    await expect(relay).rejects.toMatchObject({
      code: "RESOURCE_EXHAUSTED",
      message: "the adapter's reply (HTTP 500) exceeds 100000 bytes",
    });
    expect(relayed).toBeLessThanOrEqual(100_000);
    expect(statuses[0]).toBe(500);
  });
});
