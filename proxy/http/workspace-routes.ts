import { type Context, Hono } from "hono";
import { DnsLabel } from "../../contracts/session-spec.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import type { WorkspaceFilesRelay, WorkspaceTarget } from "../relay/workspace-files.ts";
import type { RpcAccess } from "./rpc-access.ts";

/**
 * The workspace files API (issue 18), the same routes under a HarnessSession
 * (`/v1/namespaces/{ns}/harnesssessions/{name}/workspace…`) and an RPC workspace
 * (`/v1/workspaces/{container_name}/workspace…`):
 * `GET …/files?path=DIR` (list), `GET|PUT|DELETE …/files/{path}`, `GET …:archive?path=DIR` (tar),
 * `GET …:diff` (a git diff against the commit the workspace was seeded from).
 * An oversized upload or download is 413 RESOURCE_EXHAUSTED.
 */
export function workspaceFileRoutes(
  files: WorkspaceFilesRelay,
  targetOf: (c: Context) => Promise<WorkspaceTarget>,
): Hono {
  return new Hono()
    .get("/workspace/files", async (c) =>
      c.json(await files.list(await targetOf(c), c.req.query("path") ?? "")),
    )
    .get("/workspace/files/:path{.+}", (c) =>
      bounded(c, async () => files.download(c, await targetOf(c), pathParam(c), "file")),
    )
    .put("/workspace/files/:path{.+}", (c) =>
      bounded(c, async () => files.upload(c, await targetOf(c), pathParam(c))),
    )
    .delete("/workspace/files/:path{.+}", async (c) =>
      c.json(await files.delete(await targetOf(c), pathParam(c))),
    )
    .get("/:action{workspace:archive}", (c) =>
      bounded(c, async () => files.download(c, await targetOf(c), c.req.query("path") ?? "", "archive")),
    )
    .get("/:action{workspace:diff}", (c) => bounded(c, async () => files.diff(c, await targetOf(c))));
}

/** Under `/v1/namespaces`: `/{ns}/harnesssessions/{name}/workspace…`. */
export function harnessWorkspaceRoutes(files: WorkspaceFilesRelay): Hono {
  return new Hono().route(
    "/:ns/harnesssessions/:name",
    workspaceFileRoutes(files, (c) =>
      files.ofSession(
        parseInput(DnsLabel, c.req.param("ns") ?? "", "namespace", { in: "path", name: "namespace" }),
        parseInput(DnsLabel, c.req.param("name") ?? "", "name", { in: "path", name: "name" }),
      ),
    ),
  );
}

/**
 * Under `/v1/workspaces`: `/{container_name}/workspace…` (RPC workspaces), read with the owning
 * namespace's view (or its HarnessSession's chat), written with its edit; one the token may not
 * read is NOT_FOUND like a missing one (rpc-access.ts).
 */
export function rpcWorkspaceRoutes(files: WorkspaceFilesRelay, access: RpcAccess): Hono {
  return new Hono().route(
    "/:container",
    workspaceFileRoutes(files, async (c) => {
      const container = c.req.param("container") ?? "";
      const action = c.req.method === "GET" || c.req.method === "HEAD" ? "read" : "write";
      await access.assertWorkspace(c.get("principal"), container, action, `${c.req.method} ${c.req.path}`);
      return files.ofWorkspace(container);
    }),
  );
}

/** The `{path}` of `…/files/{path}`, percent-decoded once. */
function pathParam(c: Context): string {
  return c.req.param("path") ?? "";
}

async function bounded(c: Context, run: () => Promise<Response>): Promise<Response> {
  try {
    return await run();
  } catch (error) {
    const coded = error as { code?: string; message?: string; details?: Record<string, unknown> };
    if (coded.code !== "RESOURCE_EXHAUSTED") throw error;
    return c.json(
      { code: "RESOURCE_EXHAUSTED", message: coded.message ?? "too large", details: coded.details },
      413,
    );
  }
}
