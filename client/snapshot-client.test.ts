import { describe, expect, it } from "vitest";
import { AgentSessionsClient } from "./client.ts";

/** A client whose fetch records each request and answers with `reply`. */
function recording(reply: () => Response) {
  const seen: { url: string; method: string; body: string }[] = [];
  const client = new AgentSessionsClient({
    baseUrl: "http://server",
    token: "t",
    fetch: (async (url: string, init: RequestInit) => {
      const body = init.body === undefined ? "" : await new Response(init.body).text();
      seen.push({ url, method: init.method ?? "GET", body });
      return reply();
    }) as typeof fetch,
  });
  return { client, seen };
}

describe("snapshots in the client (issue 38)", () => {
  it("takes, restores, reads, lists and deletes through the routes of docs/http-api.md", async () => {
    const { client, seen } = recording(() => Response.json({ ok: true }));
    await client.snapshot("team-a", "chat", "s1");
    await client.restore("team-a", "chat", "s1");
    await client.list("sessionsnapshots", "team-a", { limit: 2 });
    await client.get("sessionsnapshots", "team-a", "s1");
    await client.delete("sessionsnapshots", "team-a", "s1");
    expect(seen).toEqual([
      {
        url: "http://server/v1/namespaces/team-a/harnesssessions/chat:snapshot",
        method: "POST",
        body: '{"name":"s1"}',
      },
      {
        url: "http://server/v1/namespaces/team-a/harnesssessions/chat:restore",
        method: "POST",
        body: '{"snapshot":"s1"}',
      },
      { url: "http://server/v1/namespaces/team-a/sessionsnapshots?limit=2", method: "GET", body: "" },
      { url: "http://server/v1/namespaces/team-a/sessionsnapshots/s1", method: "GET", body: "" },
      { url: "http://server/v1/namespaces/team-a/sessionsnapshots/s1", method: "DELETE", body: "" },
    ]);
  });

  it("exports as a stream and imports the bytes as they are, naming the engine asked for", async () => {
    const { client, seen } = recording(() => new Response("archive-bytes"));
    const exported = await client.exportSnapshot("team-a", "s1");
    expect(await new Response(exported).text()).toBe("archive-bytes");
    const json = recording(() => Response.json({ kind: "SessionSnapshot" }, { status: 201 }));
    await json.client.importSnapshot("team-a", "s2", new TextEncoder().encode("gz"), {
      engine: "kubernetes",
    });
    expect(seen[0]?.url).toBe("http://server/v1/namespaces/team-a/sessionsnapshots/s1/archive");
    expect(json.seen).toEqual([
      {
        url: "http://server/v1/namespaces/team-a/sessionsnapshots/s2/archive?engine=kubernetes",
        method: "PUT",
        body: "gz",
      },
    ]);
  });
});
