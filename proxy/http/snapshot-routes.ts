import { type Context, Hono } from "hono";

import { DnsLabel } from "../../contracts/session-spec.ts";
import type { SessionSnapshots } from "../harness/session-snapshots.ts";
import { parseInput, readJson } from "../lifecycle/request-body.ts";

/**
 * SessionSnapshots (issue 38), under `/v1/namespaces`: `POST /{ns}/harnesssessions/{name}:snapshot`
 * and `…:restore`, `GET /{ns}/sessionsnapshots[/{name}]`, `DELETE /{ns}/sessionsnapshots/{name}`,
 * `GET|PUT /{ns}/sessionsnapshots/{name}/archive` (export, import). An archive over its bound is
 * 413 RESOURCE_EXHAUSTED; a namespace over its snapshot quotas 429.
 */
export function snapshotRoutes(snapshots: SessionSnapshots): Hono {
  const ns = (raw: string) => parseInput(DnsLabel, raw, "namespace", { in: "path", name: "namespace" });
  const name = (raw: string) => parseInput(DnsLabel, raw, "name", { in: "path", name: "name" });
  /** `{name}:{verb}` of a session path (the verb is the route's). */
  const sessionOf = (target: string) => name(target.slice(0, target.lastIndexOf(":")));

  return new Hono()
    .post("/:ns/harnesssessions/:target{[^/]+:snapshot}", async (c) =>
      c.json(
        await snapshots.take(ns(c.req.param("ns")), sessionOf(c.req.param("target")), await readJson(c)),
        201,
      ),
    )
    .post("/:ns/harnesssessions/:target{[^/]+:restore}", async (c) =>
      c.json(
        await snapshots.restore(ns(c.req.param("ns")), sessionOf(c.req.param("target")), await readJson(c)),
      ),
    )
    .get("/:ns/sessionsnapshots", async (c) =>
      c.json(
        await snapshots.list(ns(c.req.param("ns")), {
          limit: c.req.query("limit"),
          continue: c.req.query("continue"),
        }),
      ),
    )
    .get("/:ns/sessionsnapshots/:name", async (c) =>
      c.json(await snapshots.get(ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .delete("/:ns/sessionsnapshots/:name", async (c) =>
      c.json(await snapshots.delete(ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .get("/:ns/sessionsnapshots/:name/archive", (c) =>
      tooLargeAs413(c, () => snapshots.exportArchive(c, ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .put("/:ns/sessionsnapshots/:name/archive", (c) =>
      tooLargeAs413(c, async () =>
        c.json(
          await snapshots.importArchive(
            c,
            ns(c.req.param("ns")),
            name(c.req.param("name")),
            c.req.query("engine"),
          ),
          201,
        ),
      ),
    );
}

/** An archive over its byte bound (details.limit_bytes) is 413; a quota's RESOURCE_EXHAUSTED stays 429. */
async function tooLargeAs413(c: Context, run: () => Promise<Response>): Promise<Response> {
  try {
    return await run();
  } catch (error) {
    const coded = error as { code?: string; message?: string; details?: Record<string, unknown> };
    if (coded.code !== "RESOURCE_EXHAUSTED" || coded.details?.limit_bytes === undefined) throw error;
    return c.json({ code: coded.code, message: coded.message ?? "too large", details: coded.details }, 413);
  }
}
