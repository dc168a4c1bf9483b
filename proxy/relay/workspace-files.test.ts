import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";
import { toErrorResponse } from "../http/error-response.ts";
import { rpcWorkspaceRoutes } from "../http/workspace-routes.ts";
import { ADMIN_PRINCIPAL } from "../http/api-tokens.ts";
import { RpcAccess } from "../http/rpc-access.ts";
import type { RelayChunk } from "../lifecycle/runner-directory.ts";
import type { Store } from "../store/store.ts";
import type { RelayLink } from "./request-relay.ts";
import { WorkspaceFilesRelay } from "./workspace-files.ts";

/** A runner holding one workspace's files in memory, answering the `workspace_*` commands. */
function fakeRunner() {
  const files = new Map<string, Buffer>();
  const staged = new Map<string, Buffer>();
  const commands: RunnerCommand[] = [];
  const listeners = new Map<string, (c: RelayChunk) => void>();
  const link = {
    connectedRunners: () => [],
    isConnected: () => true,
    onRelayChunk(id: string, l: (c: RelayChunk) => void) {
      listeners.set(id, l);
      return () => listeners.delete(id);
    },
    async command(_runner: string, c: RunnerCommand, _timeoutMs?: number, bulk?: Uint8Array) {
      commands.push(c);
      switch (c.kind) {
        case "workspace_list":
          return {
            ok: true,
            result: {
              entries: [...files.keys()].map((name) => ({
                name,
                type: "file",
                size: files.get(name)?.length ?? 0,
                mtime: "2026-12-01T00:00:00.000Z",
              })),
            },
          };
        case "workspace_read": {
          const content =
            c.what === "archive"
              ? Buffer.from("TAR:")
              : c.what === "diff"
                ? Buffer.from(`DIFF:${c.path}`)
                : files.get(c.path);
          if (!content)
            return {
              ok: false,
              error: { code: "NOT_FOUND", message: `/workspace/${c.path} does not exist` },
            };
          for (let i = 0; i < content.length; i += WORKSPACE_CHUNK_BYTES)
            listeners.get(c.relay_id)?.({
              relay_id: c.relay_id,
              data: content.subarray(i, i + WORKSPACE_CHUNK_BYTES).toString("base64"),
              done: false,
            });
          listeners.get(c.relay_id)?.({ relay_id: c.relay_id, data: "", done: true });
          return { ok: true, result: { size: content.length } };
        }
        case "workspace_write": {
          if (c.abort) {
            staged.delete(c.upload_id);
            return { ok: true, result: { size: 0 } };
          }
          // The hub carries `bulk` raw or as base64 (runner-connection.ts); here it comes as given.
          expect(c.data).toBe("");
          const data = Buffer.from(bulk ?? new Uint8Array());
          expect(data.length).toBeLessThanOrEqual(WORKSPACE_CHUNK_BYTES);
          const all = Buffer.concat([staged.get(c.upload_id) ?? Buffer.alloc(0), data]);
          staged.set(c.upload_id, all);
          if (c.done) {
            files.set(c.path, all);
            staged.delete(c.upload_id);
          }
          return { ok: true, result: { size: all.length } };
        }
        case "workspace_delete":
          return files.delete(c.path)
            ? { ok: true, result: { deleted: true } }
            : { ok: false, error: { code: "NOT_FOUND", message: "absent" } };
        default:
          throw new Error(`unexpected ${c.kind}`);
      }
    },
  } as unknown as RelayLink;
  return { files, staged, commands, link };
}

const SEEDED = "5eed".repeat(10);

function app(
  maxBytes = 3 * WORKSPACE_CHUNK_BYTES,
  repo?: { url: string; path: string },
  /** null: a workspace seeded before servers kept the commit. */
  seededCommit: string | null = SEEDED,
) {
  const runner = fakeRunner();
  const store = {
    getWorkspace: async (name: string) =>
      name === "ws-1"
        ? {
            container_name: "ws-1",
            runner_id: "r1",
            spec: { repo },
            seeded_commit: seededCommit ?? undefined,
          }
        : undefined,
  } as unknown as Store;
  const relay = new WorkspaceFilesRelay({ store, runners: runner.link, maxBytes });
  // The admin token: what a scoped token may reach is route-access.test.ts's matrix.
  const hono = new Hono()
    .use("*", (c, next) => {
      c.set("principal", ADMIN_PRINCIPAL);
      return next();
    })
    .route("/v1/workspaces", rpcWorkspaceRoutes(relay, new RpcAccess({ store })));
  hono.onError((e, c) => {
    const { status, body } = toErrorResponse(e);
    return c.json(body, status as 400);
  });
  const call = (method: string, path: string, body?: Uint8Array | string) =>
    hono.request(`/v1/workspaces/ws-1/workspace${path}`, { method, ...(body !== undefined ? { body } : {}) });
  return { ...runner, call };
}

describe("workspace files relay", () => {
  it("an upload is sent in ordered pieces of at most WORKSPACE_CHUNK_BYTES, then downloads the same bytes", async () => {
    const a = app();
    const content = Buffer.alloc(2 * WORKSPACE_CHUNK_BYTES + 17, 7);
    const put = await a.call("PUT", "/files/dir/data.bin", content);
    expect(put.status).toBe(201);
    expect(await put.json()).toEqual({ path: "dir/data.bin", size: content.length });
    const pieces = a.commands.filter((c) => c.kind === "workspace_write");
    expect(pieces.map((p) => p.kind === "workspace_write" && [p.seq, p.done])).toEqual([
      [0, false],
      [1, false],
      [2, true],
    ]);
    const got = await a.call("GET", "/files/dir/data.bin");
    expect(got.status).toBe(200);
    expect(got.headers.get("content-disposition")).toBe(
      "attachment; filename=\"data.bin\"; filename*=UTF-8''data.bin",
    );
    expect(Buffer.from(await got.arrayBuffer()).equals(content)).toBe(true);
  });

  it("an upload over the limit is 413 RESOURCE_EXHAUSTED, its staged pieces dropped, no file written", async () => {
    const a = app(WORKSPACE_CHUNK_BYTES + 10);
    const put = await a.call("PUT", "/files/big.bin", Buffer.alloc(WORKSPACE_CHUNK_BYTES + 11));
    expect(put.status).toBe(413);
    expect(await put.json()).toMatchObject({
      code: "RESOURCE_EXHAUSTED",
      details: { limit_bytes: WORKSPACE_CHUNK_BYTES + 10 },
    });
    expect(a.files.has("big.bin")).toBe(false);
    expect(a.staged.size).toBe(0);
  });

  it("a bad path is 400 INVALID_ARGUMENT before anything reaches the runner", async () => {
    const a = app();
    for (const [method, path] of [
      ["GET", "/files/..%2Fetc%2Fpasswd"],
      ["PUT", "/files/a%2F..%2F..%2Fx"],
      ["DELETE", "/files/%2Fetc%2Fhosts"],
      ["GET", "/files?path=/etc"],
      ["GET", ":archive?path=.."],
    ]) {
      const r = await a.call(method as string, path as string, method === "PUT" ? "x" : undefined);
      expect([method, path, r.status, ((await r.json()) as { code: string }).code]).toEqual([
        method,
        path,
        400,
        "INVALID_ARGUMENT",
      ]);
    }
    expect(a.commands).toEqual([]);
  });

  it("a file name above U+00FF downloads with an RFC 6266 filename* and an ASCII fallback", async () => {
    const a = app();
    a.files.set('dir/résumé-データ "1".txt', Buffer.from("x"));
    const got = await a.call("GET", `/files/dir/${encodeURIComponent('résumé-データ "1".txt')}`);
    expect(got.status).toBe(200);
    expect(got.headers.get("content-disposition")).toBe(
      `attachment; filename="r_sum_-___ _1_.txt"; filename*=UTF-8''${"r%C3%A9sum%C3%A9-%E3%83%87%E3%83%BC%E3%82%BF%20%221%22.txt"}`,
    );
    expect(await got.text()).toBe("x");
  });

  it("a path segment longer than 255 bytes is 400 INVALID_ARGUMENT before anything reaches the runner", async () => {
    const a = app();
    const r = await a.call("GET", `/files/dir/${"a".repeat(300)}`);
    expect(r.status).toBe(400);
    expect(await r.json()).toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringContaining("longer than 255 bytes"),
    });
    expect(a.commands).toEqual([]);
  });

  it("lists, archives, deletes; a runner error keeps its code; an unknown workspace is 404", async () => {
    const a = app();
    a.files.set("x.txt", Buffer.from("x"));
    const listed = await a.call("GET", "/files");
    expect(await listed.json()).toEqual({
      path: "",
      entries: [expect.objectContaining({ name: "x.txt", size: 1 })],
    });
    const tar = await a.call("GET", ":archive?path=/workspace");
    expect(tar.headers.get("content-type")).toBe("application/x-tar");
    expect(await tar.text()).toBe("TAR:");
    expect(await (await a.call("DELETE", "/files/x.txt")).json()).toEqual({ path: "x.txt", deleted: true });
    const gone = await a.call("GET", "/files/x.txt");
    expect(gone.status).toBe(404);
    expect(((await gone.json()) as { message: string }).message).toBe(
      "workspace ws-1: /workspace/x.txt does not exist",
    );
    expect((await a.call("DELETE", "/files/")).status).toBe(404);
  });

  it("a diff is of the seeded checkout's path, as text/x-diff; without a seeded repository FAILED_PRECONDITION, nothing sent", async () => {
    const seeded = app(undefined, { url: "http://10.0.0.1:80/app.git", path: "app" });
    const diff = await seeded.call("GET", ":diff");
    expect(diff.status).toBe(200);
    expect(diff.headers.get("content-type")).toMatch(/^text\/x-diff/);
    expect(await diff.text()).toBe("DIFF:app");
    // Against the commit the store recorded from the seed, sent with the command (issue 34 item 12).
    expect(seeded.commands).toMatchObject([
      { kind: "workspace_read", what: "diff", path: "app", seeded_commit: SEEDED },
    ]);
    const plain = app();
    const refused = await plain.call("GET", ":diff");
    expect(refused.status).toBe(412);
    expect(await refused.json()).toMatchObject({
      code: "FAILED_PRECONDITION",
      message: expect.stringContaining("was not seeded from a repository"),
    });
    expect(plain.commands).toEqual([]);
  });

  it("a workspace with no recorded seeded commit (seeded before servers kept one) is FAILED_PRECONDITION SeededCommitUnknown, nothing sent", async () => {
    const old = app(undefined, { url: "http://10.0.0.1:80/app.git", path: "app" }, null);
    const refused = await old.call("GET", ":diff");
    expect(refused.status).toBe(412);
    expect(await refused.json()).toMatchObject({
      code: "FAILED_PRECONDITION",
      message: expect.stringContaining("has no recorded seeded commit"),
      details: { reason: "SeededCommitUnknown" },
    });
    expect(old.commands).toEqual([]);
  });
});
