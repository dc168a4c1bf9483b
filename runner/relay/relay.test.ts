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

  it("sends the last piece of a whole reply with done (no empty closing chunk), a character split between pieces intact", async () => {
    const body = Buffer.from(JSON.stringify({ text: "grüße €" }));
    const split = body.indexOf(0xe2) + 1; // inside the three bytes of "€"
    server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write(body.subarray(0, split));
      setTimeout(() => res.end(body.subarray(split)), 20);
    });
    await new Promise<void>((r) => server?.listen(0, "127.0.0.1", r));
    const endpoint = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    const run = async (stream: boolean) => {
      const chunks: { data: string; done: boolean; status?: number | undefined }[] = [];
      await new Relays().relay(
        "relay-2",
        { endpoint, token: "t" },
        { id: "r2", input: "x", stream },
        10_000,
        {
          chunk: (data, done, status) => chunks.push({ data, done, status }),
          buffered: () => 0,
        },
      );
      return chunks;
    };
    const whole = await run(false);
    expect(whole.map((c) => c.done)).toEqual([false, true]);
    expect(whole.every((c) => c.data !== "")).toBe(true);
    expect(whole[0]?.status).toBe(200);
    expect(whole.map((c) => c.data).join("")).toBe('{"text":"grüße €"}');
    const streamed = await run(true);
    expect(streamed.length).toBeGreaterThan(1);
    expect(streamed[0]?.status).toBe(200);
    expect(streamed.map((c) => c.data).join("")).toBe('{"text":"grüße €"}');
  });
});
