import { randomBytes } from "node:crypto";
import { ResultRecord, type Usage } from "../../contracts/adapter.ts";
import { AGENT_RUN_KIND, type AgentRun, AgentRunInput } from "../../contracts/agent-run.ts";
import { CodedError } from "../../contracts/errors.ts";
import { API_VERSION, type Agent, type AgentRuntime } from "../../contracts/resources.ts";
import { type Admission, defaultAdmission } from "../lifecycle/admission.ts";
import type { Logger } from "../observability/log.ts";
import { gatewayFieldOf } from "../lifecycle/gateway-grant.ts";
import { chooseRunner } from "../lifecycle/placement.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { assertApproved, resolveCredentials } from "../lifecycle/session-spec-builder.ts";
import type { Store } from "../store/store.ts";

export type AgentRunsOptions = {
  store: Store;
  runners: RunnerDirectory;
  log: Logger;
  /** The environment offered to sessions, where Agent `secretRef` credentials are read (offeredCredentialEnv). @default none */
  secretEnv?: Record<string, string | undefined>;
  /** What the operator admits (egress guard). @default defaultAdmission() */
  admission?: Admission;
  /** Runs at once at most, across runners; one more is 429 RESOURCE_EXHAUSTED (AGENT_SESSIONS_AGENT_RUNS_MAX). */
  maxConcurrent: number;
};

/** Time a runner gets on top of the run's own timeout (pulling the image, network setup). */
const RUNNER_OVERHEAD_MS = 120_000;

/**
 * `POST /v1/namespaces/{ns}/agentruns`: one run of a one-shot (v1alpha1) runtime, to completion
 * (contracts/agent-run.ts). The runner starts the runtime's one-shot entry in a fresh container
 * with the Agent's allowed credentials only, waits for it to exit, and removes it with its
 * network. The answer is the run with its status; nothing is kept running.
 */
export class AgentRuns {
  readonly #o: AgentRunsOptions;
  /** Runs in flight per runner: each takes a place of the runner's capacity while it runs. */
  readonly #running = new Map<string, number>();
  /** Runs in flight per namespace (its AGENT_SESSIONS_NAMESPACE_MAX_AGENT_RUNS quota). */
  readonly #inNamespace = new Map<string, number>();
  #total = 0;

  constructor(options: AgentRunsOptions) {
    this.#o = options;
  }

  async run(namespace: string, body: unknown): Promise<AgentRun> {
    const input = parseInput(AgentRunInput, body, AGENT_RUN_KIND);
    if (input.metadata.namespace !== undefined && input.metadata.namespace !== namespace)
      throw new CodedError("INVALID_ARGUMENT", `metadata.namespace must match the path (${namespace})`);
    const name = input.metadata.name ?? `run-${randomBytes(4).toString("hex")}`;
    const { spec } = input;
    const agent = (await this.#o.store.getResource("Agent", namespace, spec.agentRef)) as Agent | undefined;
    if (!agent) throw new CodedError("NOT_FOUND", `Agent ${namespace}/${spec.agentRef} not found`);
    const runtimeRef = `${namespace}/${agent.spec.runtimeRef}`;
    const runtime = (await this.#o.store.getResource("AgentRuntime", namespace, agent.spec.runtimeRef)) as
      | AgentRuntime
      | undefined;
    if (!runtime) throw new CodedError("FAILED_PRECONDITION", `AgentRuntime ${runtimeRef} not found`);
    if (runtime.spec.contract !== "v1alpha1")
      throw new CodedError(
        "FAILED_PRECONDITION",
        `AgentRuntime ${runtimeRef} declares contract ${runtime.spec.contract} (sessions); AgentRuns run one-shot v1alpha1 runtimes — use a HarnessSession`,
        { reason: "RuntimeContractUnsupported" },
      );
    const admission = this.#o.admission ?? defaultAdmission();
    assertApproved(runtime, admission);
    // Runs skip the policy pack (no stack): the server's egress guard is what stands in for it.
    admission.egress.assertAllowed(
      agent.spec.egress,
      `Agent ${namespace}/${agent.metadata.name}`,
      "FAILED_PRECONDITION",
    );
    if (agent.spec.model)
      admission.egress.assertModelAllowed(
        agent.spec.model.baseUrl,
        `Agent ${namespace}/${agent.metadata.name}`,
        "FAILED_PRECONDITION",
      );
    // MCP servers reach sessions only (docs/mcp.md): a run would silently go without the tools.
    if ((agent.spec.mcpServers?.length ?? 0) > 0)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `Agent ${namespace}/${agent.metadata.name} binds MCP servers, which only sessions get (through the runner's gateway); one-shot AgentRuns do not — use a HarnessSession`,
        { reason: "McpUnsupported" },
      );
    const credentials = resolveCredentials(agent, this.#o.secretEnv ?? {});
    // A run takes a place of its runner's capacity like a workspace, and a draining runner none.
    const load = await this.#o.store.countWorkspacesByRunner();
    for (const [runnerId, runs] of this.#running) load.set(runnerId, (load.get(runnerId) ?? 0) + runs);
    const draining = new Set(
      (await this.#o.store.listRunners()).filter((r) => r.draining).map((r) => r.runner_id),
    );
    // One-shot runs are a Docker driver feature; other runners answer UNIMPLEMENTED.
    const connected = this.#o.runners
      .connectedRunners()
      .map((r) => ({ ...r, draining: r.draining || draining.has(r.runner_id) }));
    const docker = connected.filter((r) => r.engine === "docker");
    // From the cap check to the count below nothing awaits: concurrent runs see each other.
    const { maxConcurrent } = this.#o;
    if (this.#total >= maxConcurrent)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `${this.#total} agent runs are running, the most this server runs at once (AGENT_SESSIONS_AGENT_RUNS_MAX); retry later`,
        { limit: maxConcurrent },
      );
    admission.quotas?.assertRoom("agentRuns", namespace, this.#inNamespace.get(namespace) ?? 0);
    const placement = chooseRunner(docker.length ? docker : connected, load);
    if (!placement.ok) throw new CodedError(placement.code, placement.message);
    const runnerId = placement.runner.runner_id;
    this.#running.set(runnerId, (this.#running.get(runnerId) ?? 0) + 1);
    this.#inNamespace.set(namespace, (this.#inNamespace.get(namespace) ?? 0) + 1);
    this.#total++;
    try {
      return await this.#execute(namespace, name, input.spec, agent, runtime, credentials, runnerId);
    } finally {
      this.#total--;
      const inNamespace = (this.#inNamespace.get(namespace) ?? 1) - 1;
      if (inNamespace > 0) this.#inNamespace.set(namespace, inNamespace);
      else this.#inNamespace.delete(namespace);
      const left = (this.#running.get(runnerId) ?? 1) - 1;
      if (left > 0) this.#running.set(runnerId, left);
      else this.#running.delete(runnerId);
    }
  }

  async #execute(
    namespace: string,
    name: string,
    spec: AgentRunInput["spec"],
    agent: Agent,
    runtime: AgentRuntime,
    credentials: Record<string, string>,
    runnerId: string,
  ): Promise<AgentRun> {
    const runtimeRef = `${namespace}/${agent.spec.runtimeRef}`;

    const env: Record<string, string> = {};
    if (agent.spec.model) {
      env.MODEL_BASE_URL = agent.spec.model.baseUrl;
      env.MODEL_NAME = agent.spec.model.name;
    }
    const timeoutMs = spec.timeoutSeconds * 1_000;
    const startTime = new Date().toISOString();
    this.#o.log("info", "agent run starting", { namespace, name, agent: spec.agentRef, runtime: runtimeRef });
    const outcome = await this.#o.runners.command(
      runnerId,
      {
        kind: "run_once",
        run_id: name,
        image: runtime.spec.image,
        ...(runtime.spec.command ? { command: runtime.spec.command } : {}),
        input: spec.input,
        env,
        credentials,
        ...gatewayFieldOf(agent),
        egress: agent.spec.egress,
        timeout_ms: timeoutMs,
      },
      timeoutMs + RUNNER_OVERHEAD_MS,
    );
    if (!outcome.ok)
      throw new CodedError(
        outcome.error.code,
        `agent run ${namespace}/${name} failed: ${outcome.error.message}`,
      );
    const run = outcome.result;
    const last = run.output.trim().split("\n").pop() ?? "";
    const record = ResultRecord.safeParse(parseJson(last));
    const succeeded = run.exit_code === 0 && (!record.success || record.data.outcome === "succeeded");
    // The gateway's count when the runner has one (issue 35): an agent can claim anything.
    const usage: Usage = run.gateway_usage ?? (record.success ? record.data.usage : "unavailable");
    const status: AgentRun["status"] = {
      phase: succeeded ? "Succeeded" : "Failed",
      exitCode: run.exit_code,
      output: record.success ? (record.data.output ?? "") : run.output,
      usage,
      ...(run.gateway_usage !== undefined ? { usageSource: "gateway" as const } : {}),
      startTime,
      completionTime: new Date().toISOString(),
    };
    if (record.success) status.result = record.data;
    if (run.resolved_image_digest) status.resolvedImageDigest = run.resolved_image_digest;
    if (run.timed_out) status.message = `killed after ${spec.timeoutSeconds}s`;
    else if (!succeeded)
      status.message =
        record.success && record.data.error ? record.data.error : `exited with ${run.exit_code}`;
    if (run.output_truncated_bytes) {
      status.outputTruncatedBytes = run.output_truncated_bytes;
      const note = `output truncated: the first ${run.output_truncated_bytes} bytes of stdout were dropped, the last ${Buffer.byteLength(run.output)} kept`;
      status.message = status.message ? `${status.message}; ${note}` : note;
    }
    this.#o.log("info", "agent run finished", {
      namespace,
      name,
      phase: status.phase,
      exit_code: run.exit_code,
    });
    return { apiVersion: API_VERSION, kind: AGENT_RUN_KIND, metadata: { name, namespace }, spec, status };
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
