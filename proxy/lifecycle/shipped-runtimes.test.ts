import { afterEach, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

const image = (name: string) => `127.0.0.1:5000/agent-sessions/${name}@sha256:${"a".repeat(64)}`;

describe("registering the shipped runtimes on first start", () => {
  let t: TestServer | undefined;
  afterEach(async () => {
    await t?.close();
  });

  const read = async (name: string) => {
    const res = await fetch(`${t?.server.url}/v1/namespaces/default/agentruntimes/${name}`, {
      headers: { authorization: `Bearer ${t?.server.config.adminToken}` },
    });
    return { status: res.status, body: (await res.json()) as { spec?: Record<string, unknown> } };
  };

  it("registers each runtime whose image is configured, as the catalogue declares it, and no other", async () => {
    t = await startTestServer({ shippedImages: { reference: image("reference"), pi: image("pi") } });
    expect((await read("reference")).body.spec).toEqual({
      image: image("reference"),
      contract: "v1alpha2",
      capabilities: ["streaming", "resume"],
    });
    expect((await read("pi")).body.spec).toMatchObject({
      image: image("pi"),
      contract: "v1alpha2",
      capabilities: ["streaming", "tools", "resume"],
      agent: { command: ["/usr/local/bin/node", "/app/runtimes/pi/agent.ts"] },
    });
    expect((await read("hermes")).status).toBe(404);
    expect((await read("compass")).status).toBe(404);
  });
});
