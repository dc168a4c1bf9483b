/**
 * What the end-to-end agent-session suites share on top of system.ts: a namespace of their own
 * (an AgentRuntime copied from `default/reference`, and Agents), probes of the real engine by that
 * namespace's labels (containers, volumes, networks, agent processes, stacks), the frames of one
 * session, and a cleanup that runs even when a test failed. Nothing here fakes an engine.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import Docker from "dockerode";
import type { Frame } from "../../contracts/compass.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import { Labels } from "../../contracts/session-spec.ts";
import { StackManager } from "../../stacks/index.ts";
import { pendingRecordings } from "../../stacks/recording.ts";
import { sseEvents } from "./sse.ts";
import type { SseEvent, System } from "./system.ts";

const run = promisify(execFile);

export function dockerClient(): Docker {
  const host = process.env.DOCKER_HOST ?? "";
  if (!host.startsWith("unix://")) throw new Error(`DOCKER_HOST (${host}) is not the test bed's socket`);
  return new Docker({ socketPath: host.slice("unix://".length) });
}

/** The `docker` CLI against the test bed's engine; stdout. */
export async function dockerCli(...args: string[]): Promise<string> {
  return (await run("docker", args, { encoding: "utf8" })).stdout;
}

/**
 * An AgentRuntime in `namespace` (one `serve` registered in `default`, copied: `reference` unless
 * `options.runtime` names another) and one Agent per name bound to it, each with `options.agent`
 * added to its spec (a model endpoint, credentials and egress for a runtime that calls a model).
 */
export async function setUpNamespace(
  system: System,
  namespace: string,
  agents: string[],
  options: { runtime?: string; agent?: Record<string, unknown> } = {},
): Promise<void> {
  const name = options.runtime ?? "reference";
  const got = await system.call("GET", `/v1/namespaces/default/agentruntimes/${name}`);
  // Read it out of a list too: GET of one resource has answered with the namespace's list.
  const shipped = ((got.body.items as unknown[] | undefined) ?? [got.body]).find(
    (r) => (r as { metadata?: { name?: string } }).metadata?.name === name,
  ) as { spec: unknown } | undefined;
  if (got.status !== 200 || !shipped)
    throw new Error(`no AgentRuntime default/${name}: ${JSON.stringify(got.body)}`);
  const runtime = await system.call("PUT", `/v1/namespaces/${namespace}/agentruntimes/${name}`, {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { name, namespace },
    spec: shipped.spec,
  });
  if (runtime.status >= 300) throw new Error(`PUT AgentRuntime: ${JSON.stringify(runtime.body)}`);
  for (const agentName of agents) {
    const agent = await system.call("PUT", `/v1/namespaces/${namespace}/agents/${agentName}`, {
      apiVersion: API_VERSION,
      kind: "Agent",
      metadata: { name: agentName, namespace },
      spec: { runtimeRef: name, ...options.agent },
    });
    if (agent.status >= 300) throw new Error(`PUT Agent ${agentName}: ${JSON.stringify(agent.body)}`);
  }
}

export type ContainerInfo = { name: string; state: string; session: string };

/** Every container of the namespace (running or not), optionally only one agent's (`<agent>-…` sessions). */
export async function containersOf(namespace: string, agent?: string): Promise<ContainerInfo[]> {
  const list = await dockerClient().listContainers({
    all: true,
    filters: JSON.stringify({ label: [`${Labels.namespace}=${namespace}`] }),
  });
  return list
    .map((c) => ({
      name: (c.Names[0] ?? "").replace(/^\//, ""),
      state: c.State,
      session: c.Labels[Labels.session] ?? "",
    }))
    .filter((c) => agent === undefined || c.session.startsWith(`${agent}-`))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** Volumes and networks of the namespace, by name. */
export async function volumesAndNetworksOf(
  namespace: string,
): Promise<{ volumes: string[]; networks: string[] }> {
  const docker = dockerClient();
  const filters = JSON.stringify({ label: [`${Labels.namespace}=${namespace}`] });
  const { Volumes } = await docker.listVolumes({ filters });
  const networks = await docker.listNetworks({ filters });
  return { volumes: (Volumes ?? []).map((v) => v.Name).sort(), networks: networks.map((n) => n.Name).sort() };
}

/** PIDs of reference agents running in a container (busybox `ps` in it); none when it does not run. */
export async function agentPids(container: string): Promise<number[]> {
  let out: string;
  try {
    out = await dockerCli("exec", container, "ps", "-o", "pid,args");
  } catch {
    return [];
  }
  return out
    .split("\n")
    .filter((line) => line.includes("/app/runtimes/reference/agent.ts"))
    .map((line) => Number(line.trim().split(/\s+/)[0]));
}

/**
 * The session stacks in the runner's Pulumi backend (`<system>/runner`), once the runner's pending
 * recordings finished (a fast create answers before its stack exists: its recording makes it).
 */
export async function stacksOf(system: System): Promise<string[]> {
  const runnerDir = join(system.dataDir, "runner");
  const deadline = Date.now() + 300_000;
  while (pendingRecordings(runnerDir).length > 0) {
    if (Date.now() > deadline) throw new Error(`recordings never finished: ${pendingRecordings(runnerDir)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const manager = await StackManager.create(
    { dataDir: join(system.dataDir, "runner"), env: { DOCKER_HOST: process.env.DOCKER_HOST ?? "" } },
    { log: () => {} },
  );
  return (await manager.list()).sort();
}

/** The frames of one session a follower collected, in arrival order. */
export function framesOf(events: SseEvent[], sessionId: string): Frame[] {
  return events.map((e) => e.data as Frame).filter((f) => f && f.session_id === sessionId);
}

/** Its status frames as `STATE` or `STATE(reason)`, in order. */
export function statesOf(events: SseEvent[], sessionId: string): string[] {
  return framesOf(events, sessionId)
    .filter((f) => f.type === "status")
    .map((f) => {
      const { state, reason } = f.payload as { state: string; reason?: string };
      return reason ? `${state}(${reason})` : state;
    });
}

/**
 * The payloads of the agent's "agent started" log frames: the reference agent's carry `starts`
 * (its starts, counted on the volume) and `messages`; compass's neither (undefined here).
 */
export function agentStarts(events: SseEvent[], sessionId: string): { starts: number; messages: number }[] {
  return framesOf(events, sessionId)
    .filter((f) => f.type === "log" && f.payload.message === "agent started")
    .map((f) => {
      const { starts, messages } = f.payload as { starts: number; messages: number };
      return { starts, messages };
    });
}

/**
 * Remove what a suite made: RemoveAgentWorkspace for each container while the server is up, then
 * anything of the namespace left in the engine (containers, volumes, networks) by force. Never
 * throws: it runs in afterAll, after failures too; returns what it had to force.
 */
export async function removeEverything(
  system: System,
  namespace: string,
  containers: Iterable<string>,
): Promise<string[]> {
  const forced: string[] = [];
  if (system.server && system.runner)
    for (const container_name of containers)
      await system.rpc("RemoveAgentWorkspace", { container_name }).catch(() => undefined);
  const docker = dockerClient();
  for (const c of await containersOf(namespace).catch(() => [])) {
    forced.push(`container ${c.name}`);
    await docker
      .getContainer(c.name)
      .remove({ force: true })
      .catch(() => undefined);
  }
  const { volumes, networks } = await volumesAndNetworksOf(namespace).catch(() => ({
    volumes: [],
    networks: [],
  }));
  for (const n of networks) {
    forced.push(`network ${n}`);
    await docker
      .getNetwork(n)
      .remove()
      .catch(() => undefined);
  }
  for (const v of volumes) {
    forced.push(`volume ${v}`);
    await docker
      .getVolume(v)
      .remove({ force: true })
      .catch(() => undefined);
  }
  return forced;
}

/**
 * Follows one session's frames from `Last-Event-ID: from` (0 = from its first frame), and
 * resumes with the last id it saw whenever the stream ends (a server restart, a follower cut
 * off for lagging), until closed. `gap` events are kept in `gaps`.
 */
export class SessionFollower {
  readonly events: SseEvent[] = [];
  readonly gaps: unknown[] = [];
  readonly #system: System;
  readonly #sessionId: string;
  readonly #controller = new AbortController();
  readonly #done: Promise<void>;
  #last: string;

  constructor(system: System, sessionId: string, from = "0") {
    this.#system = system;
    this.#sessionId = sessionId;
    this.#last = from;
    this.#done = this.#run();
  }

  get frames(): Frame[] {
    return this.events.map((e) => e.data as Frame);
  }

  get states(): string[] {
    return statesOf(this.events, this.#sessionId);
  }

  async close(): Promise<void> {
    this.#controller.abort();
    await this.#done;
  }

  async #run(): Promise<void> {
    const signal = this.#controller.signal;
    while (!signal.aborted) {
      try {
        const res = await fetch(`${this.#system.url}/v1/events?session_id=${this.#sessionId}`, {
          headers: { authorization: `Bearer ${this.#system.adminToken}`, "last-event-id": this.#last },
          signal,
        });
        if (res.status !== 200 || !res.body) throw new Error(`events: HTTP ${res.status}`);
        for await (const event of sseEvents(res.body as unknown as AsyncIterable<Uint8Array>)) {
          if (event.event === "gap") this.gaps.push(event.data);
          else {
            this.events.push(event);
            if (event.id) this.#last = event.id;
          }
        }
      } catch {
        // the server went away or the request was aborted: resume below unless closed
      }
      if (!signal.aborted) await new Promise((r) => setTimeout(r, 200));
    }
  }
}

export { sseEvents };
