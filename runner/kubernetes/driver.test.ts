import { KubeConfig, type V1ContainerStatus, type V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { Labels, SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import type { StackManager } from "../../stacks/index.ts";
import type { ExitReason } from "../engine/driver.ts";
import { isPodReady, KubernetesDriver } from "./driver.ts";
import { exitCodeOf, oomKillsOf } from "./exec.ts";
import { PodExits } from "./pod-watch.ts";

const name = workloadName("team", "s1");

function pod(
  over: { uid?: string; status?: V1Pod["status"]; deleting?: boolean; containers?: V1ContainerStatus[] } = {},
): V1Pod {
  return {
    metadata: {
      uid: over.uid ?? "uid-1",
      name: `${name}-abc`,
      labels: {
        [Labels.session]: "s1",
        [Labels.namespace]: "team",
        [Labels.component]: "session",
        [Labels.managedBy]: "agent-sessions",
      },
      ...(over.deleting ? { deletionTimestamp: new Date() } : {}),
    },
    status: over.status ?? {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
      containerStatuses: over.containers ?? [running(0)],
    },
  };
}

function running(restartCount: number, last?: { reason: string; exitCode: number; id: string }) {
  return {
    name: "adapter",
    image: "i",
    imageID: "i",
    ready: true,
    restartCount,
    state: { running: {} },
    ...(last
      ? { lastState: { terminated: { reason: last.reason, exitCode: last.exitCode, containerID: last.id } } }
      : {}),
  } satisfies V1ContainerStatus;
}

function tracker(quiet = new Set<string>()) {
  const reports: { name: string; reason: ExitReason; detail: string }[] = [];
  const exits = new PodExits(
    (n) => quiet.has(n),
    (n, reason, detail) => reports.push({ name: n, reason, detail }),
  );
  return { exits, reports, quiet };
}

describe("PodExits maps pod objects to exit reasons", () => {
  it("records a pod on first sight without reporting its history", () => {
    const { exits, reports } = tracker();
    exits.observe("ADDED", pod({ containers: [running(4, { reason: "Error", exitCode: 1, id: "c0" })] }));
    expect(reports).toEqual([]);
  });

  it("reports a restart with OOMKilled in lastState as OOMKilled, once", () => {
    const { exits, reports } = tracker();
    exits.observe("ADDED", pod());
    const oom = pod({ containers: [running(1, { reason: "OOMKilled", exitCode: 137, id: "c1" })] });
    exits.observe("MODIFIED", oom);
    exits.observe("MODIFIED", oom);
    expect(reports).toEqual([
      { name, reason: "OOMKilled", detail: "container adapter OOMKilled with exit code 137" },
    ]);
  });

  it("reports a currently terminated container and not again when it restarts", () => {
    const { exits, reports } = tracker();
    exits.observe("ADDED", pod());
    exits.observe(
      "MODIFIED",
      pod({
        containers: [
          {
            ...running(0),
            ready: false,
            state: { terminated: { reason: "Error", exitCode: 2, containerID: "c1" } },
          },
        ],
      }),
    );
    exits.observe("MODIFIED", pod({ containers: [running(1, { reason: "Error", exitCode: 2, id: "c1" })] }));
    expect(reports.map((r) => r.reason)).toEqual(["ContainerExited"]);
  });

  it("reports a pod deleted from outside once, when its deletion starts", () => {
    const { exits, reports } = tracker();
    exits.observe("ADDED", pod());
    exits.observe("MODIFIED", pod({ deleting: true }));
    exits.observe("DELETED", pod({ deleting: true }));
    expect(reports).toEqual([{ name, reason: "PodDeleted", detail: `pod ${name}-abc deleted` }]);
  });

  it("says nothing about pods of workloads the runner scales down or removes", () => {
    const { exits, reports } = tracker(new Set([name]));
    exits.observe("ADDED", pod());
    exits.observe("MODIFIED", pod({ deleting: true }));
    exits.observe("DELETED", pod({ deleting: true }));
    expect(reports).toEqual([]);
  });

  it("reports an evicted pod as Evicted, not as container exits", () => {
    const { exits, reports } = tracker();
    exits.observe("ADDED", pod());
    exits.observe(
      "MODIFIED",
      pod({ status: { phase: "Failed", reason: "Evicted", message: "node low on memory" } }),
    );
    exits.observe("DELETED", pod({ status: { phase: "Failed", reason: "Evicted" } }));
    expect(reports).toEqual([{ name, reason: "Evicted", detail: "node low on memory" }]);
  });

  it("after a relist, reports pods that vanished while unwatched", () => {
    const { exits, reports } = tracker();
    exits.observe("ADDED", pod({ uid: "a" }));
    exits.reconcile([pod({ uid: "b" })]);
    expect(reports).toEqual([{ name, reason: "PodDeleted", detail: "pod deleted while unwatched" }]);
  });
});

describe("exec status and readiness", () => {
  it("reads the exit code from the exec status frame", () => {
    expect(exitCodeOf({ status: "Success" })).toBe(0);
    expect(
      exitCodeOf({
        status: "Failure",
        reason: "NonZeroExitCode",
        details: { causes: [{ reason: "ExitCode", message: "3" }] },
      }),
    ).toBe(3);
    expect(exitCodeOf({ status: "Failure", reason: "InternalError" })).toBeNull();
    expect(exitCodeOf(undefined)).toBeNull();
  });

  it("counts only a Running, Ready pod that is not being deleted", () => {
    expect(isPodReady(pod())).toBe(true);
    expect(isPodReady(pod({ deleting: true }))).toBe(false);
    expect(
      isPodReady(pod({ status: { phase: "Running", conditions: [{ type: "Ready", status: "False" }] } })),
    ).toBe(false);
    expect(isPodReady(pod({ status: { phase: "Pending" } }))).toBe(false);
  });
});

describe("oomKillsOf reads a container cgroup's OOM kill count", () => {
  it("from cgroup v1 memory.oom_control and cgroup v2 memory.events; undefined when there is none", () => {
    expect(oomKillsOf("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")).toBe(3);
    expect(oomKillsOf("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n")).toBe(1);
    expect(oomKillsOf("oom_kill_disable 0\nunder_oom 0\n")).toBeUndefined();
    expect(oomKillsOf("")).toBeUndefined();
  });
});

describe("a repository workstream on Kubernetes", () => {
  it("on a runner without a git image is refused FAILED_PRECONDITION before any stack operation, never provisioned without its checkout", async () => {
    const calls: string[] = [];
    const stacks = new Proxy(
      {},
      { get: (_t, key) => () => calls.push(String(key)) },
    ) as unknown as StackManager;
    // A cluster that is never contacted: the refusal comes first.
    const kc = new KubeConfig();
    kc.loadFromClusterAndUser(
      { name: "none", server: "https://127.0.0.1:1", skipTLSVerify: true },
      { name: "u" },
    );
    const driver = new KubernetesDriver(kc, stacks);
    const spec = SessionSpec.parse({
      namespace: "team",
      name: "s1",
      engine: "kubernetes",
      image: `127.0.0.1:5000/agent-sessions/reference@sha256:${"a".repeat(64)}`,
      contract: "v1alpha2",
      repo: { url: "http://10.213.0.1:8418/fixture.git", path: "fixture" },
    });
    await expect(driver.provision(name, spec, { credentials: {}, adapterToken: "t" })).rejects.toMatchObject({
      code: "FAILED_PRECONDITION",
      message: expect.stringContaining("no git image (AGENT_SESSIONS_GIT_IMAGE)"),
      details: { reason: "RepoCloneFailed" },
    });
    expect(calls).toEqual([]);
    // Nor has it a files API: the runner answers its commands UNIMPLEMENTED.
    expect(driver.workspace).toBeUndefined();
  });
});

describe("a runner whose sessions namespace is not the default (AGENT_SESSIONS_KUBERNETES_NAMESPACE)", () => {
  it("provisions the server's sessions in its own namespace, not the spec's default agent-sessions", async () => {
    const { createServer } = await import("node:http");
    const paths: string[] = [];
    // A cluster that refuses reading namespaces (a least-privilege runner) and has nothing else.
    const api = createServer((req, res) => {
      paths.push(`${req.method} ${req.url}`);
      const status =
        req.url?.startsWith("/api/v1/namespaces/") && req.method === "GET" && req.url.split("/").length === 5
          ? 403
          : 404;
      res.writeHead(status, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          kind: "Status",
          apiVersion: "v1",
          status: "Failure",
          code: status,
          reason: "NotFound",
        }),
      );
    });
    await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
    try {
      const port = (api.address() as { port: number }).port;
      const kc = new KubeConfig();
      kc.loadFromClusterAndUser(
        { name: "fake", server: `http://127.0.0.1:${port}`, skipTLSVerify: true },
        { name: "u" },
      );
      const upped: SessionSpec[] = [];
      const stacks = new Proxy(
        {},
        {
          get: (_t, key) =>
            key === "up"
              ? async (spec: SessionSpec) => {
                  upped.push(spec);
                  throw new Error("stack up reached");
                }
              : async () => undefined,
        },
      ) as unknown as StackManager;
      const driver = new KubernetesDriver(kc, stacks, {
        namespace: "other",
        fastPath: false,
        fastCreate: false,
      });
      // As the server sends it: kubernetes.namespace left to the schema's default.
      const spec = SessionSpec.parse({
        namespace: "team",
        name: "s1",
        engine: "kubernetes",
        image: `127.0.0.1:5000/agent-sessions/reference@sha256:${"a".repeat(64)}`,
        contract: "v1alpha2",
      });
      expect(spec.kubernetes.namespace).toBe("agent-sessions");
      await expect(driver.provision(name, spec, { credentials: {}, adapterToken: "t" })).rejects.toThrow(
        "stack up reached",
      );
      expect(upped.map((s) => s.kubernetes.namespace)).toEqual(["other"]);
      expect(paths.some((p) => p.includes("/namespaces/agent-sessions"))).toBe(false);
    } finally {
      api.close();
    }
  });
});

describe("removing a workspace whose stack does not hold its objects (a runner restarted mid-recording)", () => {
  const pvc = {
    metadata: {
      name: `${name}-workspace`,
      labels: { [Labels.managedBy]: "agent-sessions", [Labels.namespace]: "team", [Labels.session]: "s1" },
    },
  };
  const base = "/namespaces/agent-sessions";
  const everything = [
    `/api/v1${base}/persistentvolumeclaims/${name}-workspace`,
    `/api/v1${base}/secrets/${name}-credentials`,
    // Its skills (issue 39), if it had any: gone already is no error.
    `/api/v1${base}/configmaps/${name}-skills`,
    `/api/v1${base}/services/${name}`,
    `/apis/apps/v1${base}/deployments/${name}`,
    `/apis/networking.k8s.io/v1${base}/networkpolicies/${name}`,
  ].sort();

  /** `remove(name)` against a fake API server listing these PVCs; the paths it deleted. */
  async function removeWith(pvcs: unknown[]): Promise<string[]> {
    const { createServer } = await import("node:http");
    const deleted: string[] = [];
    const api = createServer((req, res) => {
      res.setHeader("content-type", "application/json");
      if (req.method === "DELETE") {
        deleted.push(String(req.url).replace(/\?.*$/, ""));
        res.end(JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Success" }));
      } else if (
        req.method === "GET" &&
        req.url?.startsWith("/api/v1/namespaces/agent-sessions/persistentvolumeclaims")
      )
        res.end(JSON.stringify({ kind: "PersistentVolumeClaimList", apiVersion: "v1", items: pvcs }));
      else {
        res.writeHead(404);
        res.end(JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", code: 404 }));
      }
    });
    await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
    try {
      const port = (api.address() as { port: number }).port;
      const kc = new KubeConfig();
      kc.loadFromClusterAndUser(
        { name: "fake", server: `http://127.0.0.1:${port}`, skipTLSVerify: true },
        { name: "u" },
      );
      // The stack holds none of them: its destroy deletes nothing.
      const stacks = { destroy: async () => {} } as unknown as StackManager;
      await new KubernetesDriver(kc, stacks).remove(name);
      return deleted.sort();
    } finally {
      api.close();
    }
  }

  it("deletes its Deployment, Service, NetworkPolicy, Secret, PVC and skills ConfigMap all the same", async () => {
    expect(await removeWith([pvc])).toEqual(everything);
  });

  it("deletes them by name when no PVC is left to find its session by (issue 34 item 11: removed means removed)", async () => {
    expect(await removeWith([])).toEqual(everything);
  });
});
