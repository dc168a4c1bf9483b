import { Hono } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import {
  RunnerAction,
  type RunnerInfo,
  type RunnerList,
  RunnerName,
  type RunnerTokenIssued,
  type RunnerTokenRevoked,
} from "../../contracts/runners.ts";
import { type Logger, silentLogger } from "../observability/log.ts";
import { listQuery, pageOf } from "../lifecycle/pagination.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { issueRunnerCredential } from "../runners/runner-identity.ts";
import { LIVE_STATES } from "../lifecycle/session-states.ts";
import type { RunnerRecord, Store } from "../store/store.ts";

export type RunnerRoutesOptions = {
  store: Store;
  runners: Pick<RunnerDirectory, "isConnected"> & {
    /** Keep the connected runner's record in step with the store (RunnerHub). */
    noteDraining?(runnerId: string, draining: boolean): void;
    /** Close the links of a runner whose credential changed, but the one presenting `keepTokenHash`. */
    closeLinksOf?(runnerName: string, keepTokenHash?: string): void;
  };
  /** Told after an undrain: work waiting for a runner (Pending HarnessSessions) may be placed now. */
  onPlacementChanged?: () => void;
  log?: Logger;
};

/**
 * The runner admin API under `/v1/runners` (admin token, like every client API):
 * `GET /` lists every runner that ever attached with its capacity, labels, load, connection and
 * drain state; `GET /{runner}` shows one; `POST /{runner}:drain` stops new placements on it (its
 * live sessions stay where they are) and `POST /{runner}:undrain` lifts that. `{runner}` is the
 * runner's name or id. The drain flag lives in the store, so it survives a server restart.
 * `POST /{name}/token` issues runner `name` a new credential (shown once; its older one stops
 * working), `DELETE /{name}/token` revokes it (the name can then register again with the runner
 * token); both close the runner's live link. The name need not have attached yet.
 */
export function runnerRoutes(options: RunnerRoutesOptions): Hono {
  const { store, runners } = options;
  const log = options.log ?? silentLogger;

  async function info(runner: RunnerRecord): Promise<RunnerInfo> {
    const [workspaces, live] = await Promise.all([
      store.listWorkspaces({ runnerId: runner.runner_id }),
      store.listSessions({ runnerId: runner.runner_id, states: LIVE_STATES }),
    ]);
    return {
      runner_id: runner.runner_id,
      runner_name: runner.runner_name,
      engine: runner.engine,
      capacity: runner.capacity,
      labels: runner.labels,
      load: workspaces.length,
      live_sessions: live.length,
      connected: runners.isConnected(runner.runner_id),
      draining: runner.draining,
      last_seen_at: runner.last_seen_at,
    };
  }

  async function find(raw: string): Promise<RunnerRecord> {
    const name = parseInput(RunnerName, raw, "runner", { in: "path", name: "runner" });
    const runner = await store.findRunner(name);
    if (!runner) throw new CodedError("NOT_FOUND", `no runner named ${name} has attached to this server`);
    return runner;
  }

  return new Hono()
    .post("/:runner/token", async (c) => {
      const name = parseInput(RunnerName, c.req.param("runner"), "runner name", {
        in: "path",
        name: "runner",
      });
      const issued = await issueRunnerCredential(store, name);
      runners.closeLinksOf?.(name, issued.tokenHash);
      log("info", "runner credential issued", { runner_name: name });
      return c.json({ runner_name: name, token: issued.credential } satisfies RunnerTokenIssued, 201);
    })
    .delete("/:runner/token", async (c) => {
      const name = parseInput(RunnerName, c.req.param("runner"), "runner name", {
        in: "path",
        name: "runner",
      });
      const revoked = await store.deleteRunnerCredential(name);
      runners.closeLinksOf?.(name);
      if (revoked) log("info", "runner credential revoked", { runner_name: name });
      return c.json({ runner_name: name, revoked } satisfies RunnerTokenRevoked);
    })
    .get("/", async (c) => {
      const query = listQuery("runners", { limit: c.req.query("limit"), continue: c.req.query("continue") });
      const page = pageOf("runners", await store.listRunners(query), query, (r) => [r.runner_name]);
      const items = await Promise.all(page.items.map(info));
      const metadata = page.next === undefined ? {} : { continue: page.next };
      return c.json({ metadata, items } satisfies RunnerList);
    })
    .get("/:runner", async (c) => c.json(await info(await find(c.req.param("runner")))))
    .post("/:target", async (c) => {
      const target = c.req.param("target");
      const colon = target.lastIndexOf(":");
      if (colon < 0)
        throw new CodedError(
          "NOT_FOUND",
          `no route for POST /v1/runners/${target}; use /v1/runners/{runner}:drain or :undrain`,
        );
      const action = parseInput(RunnerAction, target.slice(colon + 1), "action (drain or undrain)", {
        in: "path",
        name: "action",
      });
      const runner = await find(target.slice(0, colon));
      const draining = action === "drain";
      const changed = (await store.setRunnerDraining(runner.runner_id, draining)) ?? runner;
      runners.noteDraining?.(runner.runner_id, draining);
      if (runner.draining !== draining) {
        log("info", draining ? "runner draining" : "runner undrained", {
          runner_id: runner.runner_id,
          runner_name: runner.runner_name,
        });
        if (!draining) options.onPlacementChanged?.();
      }
      return c.json(await info(changed));
    });
}
