import type { Webhooks } from "../webhooks/webhooks.ts";
import { CodedError } from "../../contracts/errors.ts";
import type { SessionMetricsReader } from "../harness/session-metrics.ts";
import type { SessionLogsReader } from "../harness/session-logs.ts";
import { sessionLogsRoute } from "./session-logs-route.ts";
import { Hono } from "hono";
import { RequestId } from "../../contracts/harness-session.ts";
import { DnsLabel } from "../../contracts/session-spec.ts";
import type { AgentRuns } from "../harness/agent-runs.ts";
import type { HarnessSessions } from "../harness/harness-sessions.ts";
import type { SessionSnapshots } from "../harness/session-snapshots.ts";
import { parseInput, readJson } from "../lifecycle/request-body.ts";
import { createOnly } from "./create-only.ts";
import { WRITE_RESULT_HEADER } from "../lifecycle/unchanged-write.ts";
import type { RequestRelay } from "../relay/request-relay.ts";
import type { PortRelay } from "../relay/port-relay.ts";

export type HarnessRoutesOptions = {
  sessions: HarnessSessions;
  relay: RequestRelay;
  runs: AgentRuns;
  /**
   * Told each Agent or AgentRuntime written (resource-routes.ts): the sessions naming it that
   * failed on their binding are retried (HarnessController.rebind).
   */
  rebind?: (
    kind: "Agent" | "AgentRuntime" | "MCPServer" | "SkillPack",
    namespace: string,
    name: string,
  ) => Promise<void>;
  /** SessionSnapshots (snapshot-routes.ts); absent: no such routes. */
  snapshots?: SessionSnapshots;
  /** A session's declared ports (issue 40; port-routes.ts); absent: no such routes. */
  ports?: PortRelay;
  /** `GET …/harnesssessions/{name}/metrics` (issue 40); absent: no such route. */
  metrics?: SessionMetricsReader;
  /** Webhooks (webhook-routes.ts); absent: no such routes. */
  webhooks?: Webhooks;
  /** `GET …/harnesssessions/{name}/logs` (issue 42); absent: no such route. */
  logs?: SessionLogsReader;
};

/**
 * Under `/v1/namespaces`: `/{ns}/harnesssessions[/{name}]` (PUT, GET, PATCH, DELETE),
 * `/{ns}/harnesssessions/{name}/requests` (the proxy) with `/requests/{id}/cancel`, and
 * `/{ns}/agentruns` (one-shot runs). Handlers inline after the path (path-param types).
 */
export function harnessRoutes(options: HarnessRoutesOptions): Hono {
  const { sessions, relay, runs } = options;
  const ns = (raw: string) => parseInput(DnsLabel, raw, "namespace", { in: "path", name: "namespace" });
  const name = (raw: string) => parseInput(DnsLabel, raw, "name", { in: "path", name: "name" });

  return new Hono()
    .get("/:ns/harnesssessions", async (c) =>
      c.json(
        await sessions.list(ns(c.req.param("ns")), {
          limit: c.req.query("limit"),
          continue: c.req.query("continue"),
        }),
      ),
    )
    .get("/:ns/harnesssessions/:name", async (c) =>
      c.json(await sessions.get(ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .get("/:ns/harnesssessions/:name/metrics", async (c) => {
      if (!options.metrics) throw new CodedError("UNIMPLEMENTED", "this server reads no session metrics");
      return c.json(await options.metrics.read(ns(c.req.param("ns")), name(c.req.param("name"))));
    })
    .get("/:ns/harnesssessions/:name/logs", async (c) => {
      if (!options.logs) throw new CodedError("UNIMPLEMENTED", "this server reads no session logs");
      return sessionLogsRoute(c, options.logs, ns(c.req.param("ns")), name(c.req.param("name")));
    })
    .put("/:ns/harnesssessions/:name", async (c) => {
      const { session, created, unchanged } = await sessions.put(
        ns(c.req.param("ns")),
        name(c.req.param("name")),
        await readJson(c),
        { ifAbsent: createOnly(c) },
      );
      c.header(WRITE_RESULT_HEADER, created ? "created" : unchanged ? "unchanged" : "configured");
      return c.json(session, created ? 201 : 200);
    })
    .patch("/:ns/harnesssessions/:name", async (c) =>
      c.json(await sessions.patch(ns(c.req.param("ns")), name(c.req.param("name")), await readJson(c))),
    )
    .delete("/:ns/harnesssessions/:name", async (c) =>
      c.json(await sessions.delete(ns(c.req.param("ns")), name(c.req.param("name")))),
    )
    .post("/:ns/harnesssessions/:name/requests", (c) =>
      relay.relay(c, ns(c.req.param("ns")), name(c.req.param("name"))),
    )
    .post("/:ns/harnesssessions/:name/requests/:id/cancel", async (c) => {
      const id = parseInput(RequestId, c.req.param("id"), "request id", { in: "path", name: "id" });
      return c.json(await relay.cancel(ns(c.req.param("ns")), name(c.req.param("name")), id), 202);
    })
    .post("/:ns/agentruns", async (c) =>
      c.json(await runs.run(ns(c.req.param("ns")), await readJson(c)), 201),
    );
}
