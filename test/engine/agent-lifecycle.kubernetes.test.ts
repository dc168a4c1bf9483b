/**
 * The seed-004 agent-session lifecycle on the test bed's Kubernetes cluster: the same scenarios as
 * agent-lifecycle.docker.test.ts (agent-lifecycle-scenarios.ts) with a runner started `--engine
 * kubernetes` (each workspace is the session program's PVC, Secret, Deployment, ClusterIP Service
 * and NetworkPolicy in namespace agent-sessions; the agent runs over the pods/exec stream), and
 * with a real agent: the `compass` runtime's (runtimes/compass/agent.ts on Bun, answering from the
 * loopback model server), where the Docker file runs the reference agent — each file runs once,
 * so CI pays for the real agent on one engine; the HarnessSession files split the other way.
 * Engine-side checks and actions go through the API server and the test bed's kubectl.
 *
 * Then what only a cluster has: the hardening of a live session pod, read back from the API
 * server and checked inside its container, not on the program that declared it.
 */
import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { isPodReady } from "../../runner/kubernetes/driver.ts";
import { agentLifecycleScenarios } from "./agent-lifecycle-scenarios.ts";
import { kubernetesProbe } from "../support/engine-probes.ts";
import { kubeClients } from "../support/kube-harness.ts";
import { until } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

const SESSIONS_NAMESPACE = "agent-sessions";
const lifecycle = agentLifecycleScenarios({
  engine: "kubernetes",
  probe: () => kubernetesProbe(SESSIONS_NAMESPACE),
  runtime: "compass",
});

describe("a live session pod, as the API server and its container report it", () => {
  let container = "";
  let pod: V1Pod;

  /** Runs `sh -c script` in the session's container; its stdout. */
  const sh = (script: string) => lifecycle.probe().exec(container, ["sh", "-c", script]);

  it("a session runs in it: workspace provisioned, agent started", async () => {
    container = (await lifecycle.provision("h", "h-first")).container_name;
    await lifecycle.start(container);
    const { apps, core } = await kubeClients();
    const d = await apps.readNamespacedDeployment({ name: container, namespace: SESSIONS_NAMESPACE });
    const labelSelector = Object.entries(d.spec?.selector.matchLabels ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    pod = await until("the session's Ready pod", async () =>
      (await core.listNamespacedPod({ namespace: SESSIONS_NAMESPACE, labelSelector })).items.find(isPodReady),
    );
    // The agent's container and the workspace sidecar (the runner has a git image).
    expect(pod.spec?.containers.map((c) => c.name)).toEqual(["adapter", "workspace"]);
  });

  it("has no service-account token: automount off, no projected token volume, no token directory in the container", async () => {
    expect(pod.spec?.automountServiceAccountToken).toBe(false);
    const volumes = pod.spec?.volumes ?? [];
    expect(volumes.filter((v) => v.projected || v.secret)).toEqual([]);
    expect(volumes.map((v) => v.name).filter((n) => n.includes("token"))).toEqual([]);
    for (const c of [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])])
      expect((c.volumeMounts ?? []).map((m) => m.mountPath)).not.toContain(
        "/var/run/secrets/kubernetes.io/serviceaccount",
      );
    expect(
      (
        await sh("test -e /var/run/secrets/kubernetes.io/serviceaccount && echo present || echo absent")
      ).trim(),
    ).toBe("absent");
    // Nor a token in the environment its adapter (PID 1) runs with: not even the adapter's own,
    // which it took out of it (runtimes/kit/adapter-token.ts). The kubelet always injects the API
    // server's address (KUBERNETES_SERVICE_HOST…), which grants nothing without a token;
    // enableServiceLinks off keeps every other Service's address out.
    const names = (await lifecycle.probe().processEnv(container)).map((line) => line.split("=")[0]);
    expect(names.filter((n) => n?.includes("TOKEN"))).toEqual([]);
    expect(names.filter((n) => n?.endsWith("_SERVICE_HOST"))).toEqual(["KUBERNETES_SERVICE_HOST"]);
  });

  it("runs non-root in fact: the adapter (PID 1), the agent and an exec all have a uid other than 0", async () => {
    const uid = Number((await sh("id -u")).trim());
    expect(Number.isInteger(uid)).toBe(true);
    expect(uid).not.toBe(0);
    // /proc/<pid>/status "Uid: real effective saved fs": every one non-zero.
    const pid1 = (await sh("grep '^Uid:' /proc/1/status")).trim().split(/\s+/).slice(1).map(Number);
    expect(pid1).toHaveLength(4);
    for (const id of pid1) expect(id).not.toBe(0);
    const agents = await lifecycle.agentPids(container);
    expect(agents).toHaveLength(1);
    const agent = (await sh(`grep '^Uid:' /proc/${agents[0]}/status`))
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    expect(agent).toHaveLength(4);
    for (const id of agent) expect(id).not.toBe(0);
  });

  it("has a read-only root filesystem: a write to / fails inside the container; the workspace and /tmp are writable", async () => {
    const root = await sh("touch /probe-write 2>&1; echo rc=$?");
    expect(root).toMatch(/Read-only file system/);
    expect(root.trim()).not.toMatch(/rc=0$/);
    expect((await sh("test -e /probe-write && echo present || echo absent")).trim()).toBe("absent");
    expect((await sh("touch /workspace/.probe && rm /workspace/.probe && echo ok")).trim()).toBe("ok");
    expect((await sh("touch /tmp/.probe && rm /tmp/.probe && echo ok")).trim()).toBe("ok");
  });

  it("is not privileged, shares no host namespace, mounts no hostPath; its only volumes are the session PVC, a memory-backed /tmp and the workspace sidecar's scratch", async () => {
    const spec = pod.spec;
    expect(spec?.hostNetwork ?? false).toBe(false);
    expect(spec?.hostPID ?? false).toBe(false);
    expect(spec?.hostIPC ?? false).toBe(false);
    expect(spec?.initContainers ?? []).toEqual([]);
    for (const c of spec?.containers ?? []) {
      expect(c.securityContext?.privileged ?? false).toBe(false);
      expect(c.securityContext?.allowPrivilegeEscalation).toBe(false);
      expect(c.securityContext?.readOnlyRootFilesystem).toBe(true);
      expect(c.securityContext?.capabilities?.drop).toEqual(["ALL"]);
      expect(c.securityContext?.capabilities?.add ?? []).toEqual([]);
      expect((c.ports ?? []).filter((p) => p.hostPort)).toEqual([]);
    }
    // The volumes, exactly: the session PVC (the workspace, kept across scale-down) and /tmp, an
    // emptyDir in memory the program declares because the root filesystem is read-only and Node
    // (and the agent's tools) want a writable /tmp; it is bounded (64Mi) and dies with the pod.
    // The runner has a git image, so the pod has its `workspace` sidecar (files API, repo seed,
    // diff), with a scratch emptyDir of its own (bounded, on disk).
    expect(
      (spec?.volumes ?? []).map((v) => ({
        name: v.name,
        kinds: Object.keys(v).filter((k) => k !== "name" && v[k as keyof typeof v] !== undefined),
      })),
    ).toEqual([
      { name: "workspace", kinds: ["persistentVolumeClaim"] },
      { name: "tmp", kinds: ["emptyDir"] },
      { name: "workspace-scratch", kinds: ["emptyDir"] },
    ]);
    const [workspace, tmp, scratch] = spec?.volumes ?? [];
    expect(workspace?.persistentVolumeClaim?.claimName).toBe(`${container}-workspace`);
    expect(tmp?.emptyDir).toMatchObject({ medium: "Memory", sizeLimit: "64Mi" });
    expect(scratch?.emptyDir).toMatchObject({ sizeLimit: "256Mi" });
    expect((spec?.volumes ?? []).filter((v) => v.hostPath)).toEqual([]);
    expect(
      spec?.containers.map((c) => [c.name, (c.volumeMounts ?? []).map((m) => `${m.name}:${m.mountPath}`)]),
    ).toEqual([
      ["adapter", ["workspace:/workspace", "tmp:/tmp"]],
      ["workspace", ["workspace:/workspace", "workspace-scratch:/scratch"]],
    ]);
  });
});
