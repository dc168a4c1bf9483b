import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { WebhookEgress, WebhookEgressAllowList } from "./webhook-egress.ts";
import { webhookSender } from "./webhook-sender.ts";

const resolvesTo =
  (...addresses: string[]) =>
  async () =>
    addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));

describe("webhook egress guard", () => {
  it("refuses loopback, link-local, metadata, unspecified and multicast addresses, v4, v6 and v4-mapped", () => {
    const guard = new WebhookEgress();
    for (const address of [
      "127.0.0.1",
      "127.3.2.1",
      "169.254.169.254",
      "0.0.0.0",
      "224.0.0.1",
      "::1",
      "::",
      "fe80::1",
      "fd00:ec2::254",
      "::ffff:127.0.0.1",
      "::ffff:169.254.169.254",
    ])
      expect(guard.refusal(address), address).toBeDefined();
    for (const address of ["93.184.215.14", "10.213.0.1", "192.168.1.10", "2606:4700::6810:84e5"])
      expect(guard.refusal(address), address).toBeUndefined();
    expect(guard.refusal("169.254.169.254")).toContain("metadata");
  });

  it("checks the addresses a name resolves to, not the URL's text", async () => {
    const guard = new WebhookEgress([], resolvesTo("93.184.215.14", "127.0.0.1"));
    const checked = await guard.resolve("innocent.example");
    expect(checked).toEqual({
      ok: false,
      why: "innocent.example resolves to 127.0.0.1 is loopback 127.0.0.0/8 (the host itself)",
    });
    expect(await new WebhookEgress([], resolvesTo("93.184.215.14")).resolve("fine.example")).toMatchObject({
      ok: true,
    });
  });

  it("lets through what AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW lists, and nothing else", async () => {
    const allow = WebhookEgressAllowList.parse("127.0.0.1/32, ::1");
    expect(allow).toEqual(["127.0.0.1/32", "::1/128"]);
    const guard = new WebhookEgress(allow);
    expect(guard.refusal("127.0.0.1")).toBeUndefined();
    expect(guard.refusal("::1")).toBeUndefined();
    expect(guard.refusal("127.0.0.2")).toBeDefined();
    expect(guard.refusal("169.254.169.254")).toBeDefined();
    expect(WebhookEgressAllowList.safeParse("localhost").success).toBe(false);
    expect(WebhookEgressAllowList.safeParse("10.0.0.0/33").success).toBe(false);
  });

  it("the sender never connects to a refused receiver, and does reach an allowed one", async () => {
    let hits = 0;
    const server = createServer((_req, res) => {
      hits++;
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const refused = await webhookSender(new WebhookEgress(), 2_000)(`http://127.0.0.1:${port}/`, {}, "{}");
      expect(refused).toMatchObject({ ok: false, error: expect.stringContaining("loopback") });
      const named = await webhookSender(new WebhookEgress([], resolvesTo("127.0.0.1")), 2_000)(
        `http://receiver.example:${port}/`,
        {},
        "{}",
      );
      expect(named).toMatchObject({
        ok: false,
        error: expect.stringContaining("receiver.example resolves to"),
      });
      expect(hits).toBe(0);
      const allowed = await webhookSender(new WebhookEgress(["127.0.0.1/32"]), 2_000)(
        `http://127.0.0.1:${port}/`,
        {},
        "{}",
      );
      expect(allowed).toEqual({ ok: true, statusCode: 204 });
      // A name resolved by the guard is connected to at the address it checked.
      const pinned = await webhookSender(new WebhookEgress(["127.0.0.1/32"], resolvesTo("127.0.0.1")), 2_000)(
        `http://receiver.example:${port}/`,
        {},
        "{}",
      );
      expect(pinned).toEqual({ ok: true, statusCode: 204 });
      expect(hits).toBe(2);
    } finally {
      server.close();
    }
  });

  it("an attempt ends at its timeout when the receiver never answers", async () => {
    const server = createServer(() => undefined);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const result = await webhookSender(new WebhookEgress(["127.0.0.1/32"]), 200)(
        `http://127.0.0.1:${port}/`,
        {},
        "{}",
      );
      expect(result).toEqual({ ok: false, error: "no answer within 200 ms" });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
