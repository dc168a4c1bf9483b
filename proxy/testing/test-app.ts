/**
 * The HTTP app over an in-memory store and a given runner directory, built as compose-server.ts
 * builds it (a lifecycle over one Workspaces) but without a listener: for tests that call
 * `app.request()` and decide what the runners answer.
 */
import type { Hono } from "hono";
import { type AppOptions, buildApp } from "../http/app.ts";
import { EventBus } from "../lifecycle/event-bus.ts";
import { Lifecycle } from "../lifecycle/lifecycle.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { SessionJournal } from "../lifecycle/session-journal.ts";
import { Workspaces } from "../lifecycle/workspaces.ts";
import { silentLogger } from "../observability/log.ts";
import type { SqliteStore } from "../store/sqlite-store.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN } from "./test-server.ts";
import { testAdmission } from "./test-admission.ts";

/** A directory with no runner connected: every command answers UNAVAILABLE. */
export const noRunners: RunnerDirectory = {
  connectedRunners: () => [],
  isConnected: () => false,
  command: async () =>
    ({ ok: false, error: { code: "UNAVAILABLE", message: "no runner in this test" } }) as never,
};

/** `options` are laid over the defaults (the lifecycle's RPC handlers, the test tokens). */
export function testApp(
  store: SqliteStore,
  runners: RunnerDirectory = noRunners,
  options: Partial<AppOptions> = {},
): Hono {
  const bus = new EventBus();
  const base = { store, runners, journal: new SessionJournal(store, bus), log: silentLogger };
  const lifecycle = new Lifecycle({ ...base, workspaces: new Workspaces(base) });
  return buildApp({
    store,
    bus,
    rpc: lifecycle.handlers,
    adminToken: ADMIN_TOKEN,
    runnerToken: RUNNER_TOKEN,
    // The egress (and model endpoints) the tests' Agents name is allowed, as startTestServer's.
    admission: testAdmission(),
    ...options,
  });
}
