import { describe, expect, it } from "vitest";
import { AgentSessionsClient } from "./client.ts";

/** A client whose fetch records the request and answers with `reply`. */
function recording(reply: () => Response) {
  const seen: { url: string; method: string; type: string | null; body: string }[] = [];
  const client = new AgentSessionsClient({
    baseUrl: "http://server",
    token: "t",
    fetch: (async (url: string, init: RequestInit) => {
      const body = init.body === undefined ? "" : await new Response(init.body).text();
      seen.push({
        url,
        method: init.method ?? "GET",
        type: new Headers(init.headers).get("content-type"),
        body,
      });
      return reply();
    }) as typeof fetch,
  });
  return { client, seen };
}

describe("workspace files in the client", () => {
  it("uploads the bytes as they are, to the session's files route (the path percent-encoded)", async () => {
    const { client, seen } = recording(() =>
      Response.json({ path: "src/a b.txt", size: 5 }, { status: 201 }),
    );
    const written = await client.uploadWorkspaceFile(
      "default",
      "chat",
      "src/a b.txt",
      new TextEncoder().encode("hello"),
    );
    expect(written).toEqual({ path: "src/a b.txt", size: 5 });
    expect(seen).toEqual([
      {
        url: "http://server/v1/namespaces/default/harnesssessions/chat/workspace/files/src%2Fa%20b.txt",
        method: "PUT",
        type: "application/octet-stream",
        body: "hello",
      },
    ]);
  });

  it("downloads a stream, asks :archive for a tar, and turns an error body into a ClientError", async () => {
    const { client, seen } = recording(() => new Response("bytes"));
    expect(await new Response(await client.downloadWorkspace("default", "chat", "a.txt")).text()).toBe(
      "bytes",
    );
    await client.downloadWorkspace("default", "chat", "src", "archive");
    expect(seen.map((s) => s.url)).toEqual([
      "http://server/v1/namespaces/default/harnesssessions/chat/workspace/files/a.txt",
      "http://server/v1/namespaces/default/harnesssessions/chat/workspace:archive?path=src",
    ]);
    const failing = recording(() =>
      Response.json({ code: "INVALID_ARGUMENT", message: 'path "../x" leaves /workspace' }, { status: 400 }),
    );
    await expect(failing.client.downloadWorkspace("default", "chat", "../x")).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      status: 400,
    });
  });
});
