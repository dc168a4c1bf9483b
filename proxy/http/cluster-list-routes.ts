import { Hono } from "hono";
import { API_VERSION, type ResourcePlural, ResourceKinds } from "../../contracts/resources.ts";
import type { HarnessSessions } from "../harness/harness-sessions.ts";
import type { Admission } from "../lifecycle/admission.ts";
import { listQuery, pageOf } from "../lifecycle/pagination.ts";
import type { Store } from "../store/store.ts";
import { shownResource } from "./resource-routes.ts";

/**
 * Every namespace's objects of a kind, as Kubernetes lists `/api/v1/pods` (what `agent-sessions
 * get KIND -A` reads): `GET /v1/{agentruntimes|agents|harnesssessions}`, by namespace then name,
 * paged with `?limit=&continue=` like the namespaced lists. Not listed in route-access.ts, so
 * these need the `admin` scope: a namespace token sees its own namespace's lists only.
 */
export function clusterListRoutes(options: {
  store: Store;
  admission: Admission;
  sessions?: HarnessSessions | undefined;
}): Hono {
  const { store, sessions } = options;
  const shown = shownResource(options.admission);
  const app = new Hono();
  app.get("/:plural{(?:agentruntimes|agents)}", async (c) => {
    const plural = c.req.param("plural") as ResourcePlural;
    const { kind } = ResourceKinds[plural];
    const list = `${plural}/*`;
    const query = listQuery(list, { limit: c.req.query("limit"), continue: c.req.query("continue") });
    const page = pageOf(list, await store.listResources(kind, undefined, query), query, (r) => [
      r.metadata.namespace,
      r.metadata.name,
    ]);
    const metadata = page.next === undefined ? {} : { continue: page.next };
    return c.json({ apiVersion: API_VERSION, kind: `${kind}List`, metadata, items: page.items.map(shown) });
  });
  if (sessions)
    app.get("/harnesssessions", async (c) =>
      c.json(
        await sessions.list(undefined, { limit: c.req.query("limit"), continue: c.req.query("continue") }),
      ),
    );
  return app;
}
