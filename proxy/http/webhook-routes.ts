import { Hono } from "hono";
import { DnsLabel } from "../../contracts/session-spec.ts";
import { parseInput, readJson } from "../lifecycle/request-body.ts";
import type { Webhooks } from "../webhooks/webhooks.ts";
import { createOnly } from "./create-only.ts";

/**
 * Webhooks (issue 40), under `/v1/namespaces`: `/{ns}/webhooks[/{name}]` (PUT creates or
 * replaces, 201 on create with a generated secret shown once; GET one or a page; DELETE) and
 * `GET /{ns}/webhooks/{name}/deliveries` (recent attempts, newest first). No answer carries a
 * stored secret.
 */
export function webhookRoutes(webhooks: Webhooks): Hono {
  const ns = (raw: string) => parseInput(DnsLabel, raw, "namespace", { in: "path", name: "namespace" });
  const name = (raw: string) => parseInput(DnsLabel, raw, "name", { in: "path", name: "name" });
  return new Hono()
    .get("/:ns/webhooks", async (c) =>
      c.json(
        await webhooks.list(ns(c.req.param("ns")), {
          limit: c.req.query("limit"),
          continue: c.req.query("continue"),
        }),
      ),
    )
    .get("/:ns/webhooks/:name", async (c) =>
      c.json(await webhooks.get(ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .get("/:ns/webhooks/:name/deliveries", async (c) =>
      c.json(await webhooks.deliveries(ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .put("/:ns/webhooks/:name", async (c) => {
      const namespace = ns(c.req.param("ns"));
      const webhookName = name(c.req.param("name"));
      const ifAbsent = createOnly(c);
      const { webhook, created } = await webhooks.put(namespace, webhookName, await readJson(c), ifAbsent);
      return c.json(webhook, created ? 201 : 200);
    })
    .delete("/:ns/webhooks/:name", async (c) =>
      c.json(await webhooks.delete(ns(c.req.param("ns")), name(c.req.param("name")))),
    );
}
