import { SessionMetricsReader } from "./harness/session-metrics.ts";
import { SessionLogsReader } from "./harness/session-logs.ts";
import type { Admission } from "./lifecycle/admission.ts";
import { AgentRuns } from "./harness/agent-runs.ts";
import { AutoResumer } from "./harness/auto-resumer.ts";
import { CallerBounds } from "./lifecycle/caller-bounds.ts";
import { NamespaceBounds } from "./lifecycle/namespace-bounds.ts";
import type { EventBus } from "./lifecycle/event-bus.ts";
import { HarnessController } from "./harness/harness-controller.ts";
import { harnessWorkstream } from "./harness/harness-reconciler.ts";
import type { HarnessRoutesOptions } from "./http/harness-routes.ts";
import { HarnessSessions } from "./harness/harness-sessions.ts";
import { SessionSnapshots } from "./harness/session-snapshots.ts";
import { DEFAULT_SNAPSHOT_ARCHIVE_MAX_BYTES } from "../contracts/session-snapshot.ts";
import { IdleController } from "./harness/idle-controller.ts";
import type { Logger } from "./observability/log.ts";
import { sessionKey } from "./lifecycle/namespace-quotas.ts";
import type { ProvisionRecorder } from "./lifecycle/provision-recorder.ts";
import { type RelayLink, RequestRelay } from "./relay/request-relay.ts";
import { PortRelay } from "./relay/port-relay.ts";
import type { SessionJournal } from "./lifecycle/session-journal.ts";
import type { Sessions } from "./lifecycle/sessions.ts";
import type { HarnessStore } from "./store/harness-store.ts";
import type { Store } from "./store/store.ts";
import type { RestartPolicy } from "./harness/restart-policy.ts";
import type { Workspaces } from "./lifecycle/workspaces.ts";
import type { ReplicaCluster } from "./cluster/replica-cluster.ts";
import type { RunnerSessionReport } from "../contracts/runner-protocol.ts";
import type { StoredFrame } from "./store/store.ts";
import { observedHarnessStore } from "./webhooks/session-transitions.ts";
import { WebhookDispatcher } from "./webhooks/webhook-dispatcher.ts";
import { WebhookEgress } from "./webhooks/webhook-egress.ts";
import { webhookSender } from "./webhooks/webhook-sender.ts";
import { Webhooks } from "./webhooks/webhooks.ts";

export type HarnessWiringOptions = {
  /** HarnessSessions' tables (in the server's one database). */
  harnessStore: HarnessStore;
  store: Store;
  bus: EventBus;
  journal: SessionJournal;
  runners: RelayLink;
  /** The lifecycle's sessions (one start/stop discipline for RPCs and HarnessSessions). */
  sessions: Sessions;
  /** The lifecycle's workspaces: one placement lock, so RPCs and HarnessSessions share each runner's capacity. */
  workspaces: Workspaces;
  /** The runner directory `workspaces` provisions through: what each provision resolved the image to. */
  digests: ProvisionRecorder;
  log: Logger;
  secretEnv?: Record<string, string | undefined>;
  /** What the operator admits (egress guard). @default defaultAdmission() */
  admission?: Admission;
  /** The settings below: proxy/config.ts holds their defaults. */
  requestTimeoutMs: number;
  /** Proxied requests one API token may have in flight (caller-bounds.ts). */
  requestsPerTokenMax: number;
  /** Proxied requests to one namespace's sessions in flight, whoever the token (namespace-bounds.ts). */
  requestsPerNamespaceMax: number;
  requestBodyMaxBytes: number;
  replyMaxBytes: number;
  idleCheckMs: number;
  /** One-shot AgentRuns at once at most. */
  agentRunsMax: number;
  /** How long requests wait for an auto-resumed session to come Ready. */
  autoResumeTimeoutMs: number;
  /** Restarts after unexpected exits. */
  restartPolicy: RestartPolicy;
  /** The largest snapshot archive imported or exported (AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES). */
  snapshotArchiveMaxBytes?: number;
  /** Told the duration (seconds) of each idle-controller sweep. */
  onIdleSweep?: (seconds: number) => void;
  /**
   * The other replicas (compose-server.ts): reconciles of one session are one at a time across
   * them, and the controllers (status frames, the idle controller) run on the lease holder.
   * @default this process alone
   */
  cluster?: Pick<ReplicaCluster, "locks" | "leads" | "onLeadership">;
  /** Webhook delivery (AGENT_SESSIONS_WEBHOOK_*). @default no address allowed past the guard; 8 attempts, 1 s back-off base, 10 s per attempt */
  webhooks?: { egressAllow: string[]; attemptsMax: number; retryBaseMs: number; timeoutMs: number };
};

export type RunningHarness = {
  routes: HarnessRoutesOptions;
  /** Reconcile the sessions not settled (e.g. Pending for a runner); never throws. */
  resyncUnsettled(): void;
  /** Wakes the Paused HarnessSession whose workspace this is (an agent message, a files call). */
  wakeWorkspace(containerName: string, why: string): Promise<void>;
  /** A runner attached: Paused follows whether its engine holds each session's workload frozen. Never throws. */
  followRunner(reported: RunnerSessionReport[]): void;
  /** Stops the idle controller and the event subscription (the composition root closes the store). */
  close(): Promise<void>;
};

/**
 * Everything HarnessSessions need in a server process: their store, the controller (fed by
 * agent-session status frames), the idle controller, the request relay and one-shot runs.
 */
export async function startHarness(options: HarnessWiringOptions): Promise<RunningHarness> {
  const { store, runners, log } = options;
  const { requestTimeoutMs } = options;
  // Webhooks (issue 40) are told of every transition the controllers write, off their path.
  const webhookSettings = options.webhooks ?? {
    egressAllow: [],
    attemptsMax: 8,
    retryBaseMs: 1_000,
    timeoutMs: 10_000,
  };
  const egress = new WebhookEgress(webhookSettings.egressAllow);
  const dispatcher = new WebhookDispatcher({
    send: webhookSender(egress, webhookSettings.timeoutMs),
    log,
    attemptsMax: webhookSettings.attemptsMax,
    retryBaseMs: webhookSettings.retryBaseMs,
  });
  const webhooks = new Webhooks({ store, egress, dispatcher, log });
  const harness = observedHarnessStore(options.harnessStore, (transition) => webhooks.notify(transition));
  const quotas = options.admission?.quotas;
  // A HarnessSession counts toward its namespace's sessions from its creation (namespace-quotas.ts).
  quotas?.addSessionSource(async (namespace) =>
    (await harness.listHarnessSessions(namespace)).map((r) =>
      sessionKey(`${namespace}/${r.spec.agentRef}`, harnessWorkstream(r.name)),
    ),
  );
  const { digests } = options;
  const secretEnv = {
    ...(options.secretEnv ? { secretEnv: options.secretEnv } : {}),
    ...(options.admission ? { admission: options.admission } : {}),
  };
  const controller = new HarnessController({
    harness,
    store,
    workspaces: options.workspaces,
    digests,
    sessions: options.sessions,
    runners,
    log,
    // A stop waits for requests in flight a little longer than they may take.
    drainTimeoutMs: requestTimeoutMs + 10_000,
    restartPolicy: options.restartPolicy,
    journal: options.journal,
    ...(options.cluster ? { locks: options.cluster.locks } : {}),
    ...secretEnv,
  });
  const leads = () => options.cluster?.leads() ?? true;
  // Every replica's bus carries every frame: the lease holder alone reacts to status frames.
  const unsubscribe = options.bus.subscribe((frame) => {
    if (!leads()) return;
    controller.onFrame(frame);
    const snapshot = snapshotTaken(frame);
    if (snapshot) notifySnapshot(harness, webhooks, snapshot, log);
  });
  // A replica taking the lease over catches up with what its previous holder may have missed.
  const stopFollowingLease = options.cluster?.onLeadership((leading) => {
    if (leading)
      controller
        .resync(false)
        .catch((error: unknown) => log("error", "harness resync failed", { error: String(error) }));
  });
  const sessions = new HarnessSessions({
    harness,
    store,
    controller,
    runners,
    ...(quotas ? { quotas } : {}),
  });
  const idle = new IdleController({
    harness,
    controller,
    expire: (namespace, name) => sessions.expire(namespace, name),
    log,
    intervalMs: options.idleCheckMs,
    // Above the proxy's deadline (plus the runner's grace): only crashed relays are ever cleared.
    staleRequestMs: requestTimeoutMs + 60_000,
    ...(options.onIdleSweep ? { onSweep: options.onIdleSweep } : {}),
    leads,
  });
  // Before the API listens: nothing is Ready for this process until it serves (and says so).
  await controller.recover();
  await controller.resync(false);
  idle.start();
  const autoResume = new AutoResumer({
    harness,
    controller,
    journal: options.journal,
    log,
    timeoutMs: options.autoResumeTimeoutMs,
  });
  // Port traffic (issue 40) counts as requests in flight: one bound for both.
  const perToken = new CallerBounds(
    options.requestsPerTokenMax,
    "requests in flight",
    "AGENT_SESSIONS_REQUESTS_PER_TOKEN_MAX",
  );
  const perNamespace = new NamespaceBounds(
    options.requestsPerNamespaceMax,
    "requests in flight",
    "AGENT_SESSIONS_REQUESTS_PER_NAMESPACE_MAX",
  );
  const relay = new RequestRelay({
    harness,
    store,
    runners,
    log,
    timeoutMs: requestTimeoutMs,
    bodyMaxBytes: options.requestBodyMaxBytes,
    replyMaxBytes: options.replyMaxBytes,
    // Ready means serving: a request the runner could not relay has the session probed again.
    onRelayPathFailed: (namespace, name) => controller.enqueue(namespace, name),
    // Each request's outcome on the event stream of the agent session it was admitted to (issue
    // 42), by name: its journal's append is group-committed with the settlement.
    onRequestFinished: (session, requestId, outcome) =>
      void controller.event(
        session,
        "RequestFinished",
        { request_id: requestId, outcome },
        { grouped: true },
      ),
    perToken,
    perNamespace,
    autoResume,
  });
  // A session's declared ports (issue 40): woken and resumed like requests, counted as them.
  const ports = new PortRelay({
    harness,
    store,
    runners,
    log,
    timeoutMs: requestTimeoutMs,
    replyMaxBytes: options.replyMaxBytes,
    autoResume,
    perToken,
    perNamespace,
  });
  return {
    routes: {
      sessions,
      metrics: new SessionMetricsReader({ harness, store, runners }),
      webhooks,
      logs: new SessionLogsReader({ harness, store, runners }),
      snapshots: new SessionSnapshots({
        harness,
        store,
        runners,
        controller,
        quotas,
        log,
        archiveMaxBytes: options.snapshotArchiveMaxBytes ?? DEFAULT_SNAPSHOT_ARCHIVE_MAX_BYTES,
      }),
      rebind: (kind, namespace, name) => controller.rebind(kind, namespace, name),
      relay,
      ports,
      runs: new AgentRuns({
        store,
        runners,
        log,
        ...secretEnv,
        maxConcurrent: options.agentRunsMax,
      }),
    },
    wakeWorkspace: (containerName, why) => controller.wakeWorkspace(containerName, why),
    // On the replica holding the link (the session's queue is one across replicas).
    followRunner: (reported) => void controller.followRunner(reported),
    resyncUnsettled: () => {
      controller
        .resync(true)
        .catch((error: unknown) => log("error", "harness resync failed", { error: String(error) }));
    },
    close: async () => {
      unsubscribe();
      stopFollowingLease?.();
      controller.close();
      await idle.stop();
      dispatcher.close();
    },
  };
}

type SnapshotTaken = { namespace: string; name: string; snapshot: string; message: string; time: string };

/** A `Snapshotted` event on a session's stream (session-snapshots.ts): a snapshot of it is Ready. */
function snapshotTaken(stored: StoredFrame): SnapshotTaken | undefined {
  const { frame } = stored;
  if (frame.type !== "log") return undefined;
  const payload = frame.payload as {
    event?: unknown;
    snapshot?: unknown;
    message?: unknown;
    harness_session?: { namespace?: unknown; name?: unknown };
  };
  const session = payload.harness_session;
  if (payload.event !== "Snapshotted" || typeof payload.snapshot !== "string") return undefined;
  if (typeof session?.namespace !== "string" || typeof session.name !== "string") return undefined;
  return {
    namespace: session.namespace,
    name: session.name,
    snapshot: payload.snapshot,
    message: typeof payload.message === "string" ? payload.message : `snapshot ${payload.snapshot} taken`,
    time: frame.ts,
  };
}

/** Tell the session's Webhooks of a snapshot taken (`snapshot.ready`); in the background. */
function notifySnapshot(harness: HarnessStore, webhooks: Webhooks, taken: SnapshotTaken, log: Logger): void {
  harness
    .getHarnessSession(taken.namespace, taken.name)
    .then((record) => {
      if (!record) return;
      webhooks.notify({
        event: "snapshot.ready",
        session: { namespace: record.namespace, name: record.name, uid: record.uid },
        phase: record.phase,
        reason: "SnapshotReady",
        message: taken.message,
        time: taken.time,
        snapshot: taken.snapshot,
      });
    })
    .catch((error: unknown) => log("error", "snapshot webhook not queued", { error: String(error) }));
}
