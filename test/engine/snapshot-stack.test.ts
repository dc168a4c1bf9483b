/**
 * A snapshot's storage declared in a stack of its own (issue 38), through StackManager against the
 * real Pulumi CLI, our Docker provider, the Kubernetes provider, the test bed's dockerd and
 * cluster, and the policy pack: `upSnapshot` records a storage the runner made first (adopting it,
 * its files untouched) or makes it, the stack declares nothing else, and `destroySnapshot` leaves
 * nothing on the engine. Every object is read back from the engine, not from Pulumi's outputs.
 */
import { rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SnapshotLabels, snapshotStackName, snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { snapshotVolumeInputs } from "../../infra/docker/provider/snapshot-volume.ts";
import { snapshotPvcManifest } from "../../infra/kubernetes/snapshot-manifest.ts";
import type { StackManager } from "../../stacks/index.ts";
import { ensureNamespace, isGone, type KubeClients, kubeClients } from "../support/kube-harness.ts";
import {
  backendStateText,
  dockerClient,
  stackManagerFor,
  tempDir,
  uniqueName,
} from "../support/session-harness.ts";
import { applyTestbedEnv, builtImage } from "../support/testbed.ts";

applyTestbedEnv();

const dataDir = tempDir("snapshot-stack");
const namespace = "engine";
let manager: StackManager;

beforeAll(async () => {
  ({ manager } = await stackManagerFor(dataDir));
}, 60_000);

afterAll(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

describe("a Docker snapshot's stack", () => {
  const docker = dockerClient();
  const name = uniqueName("snap");
  const target = { storage: snapshotStorageName(namespace, name), namespace, name };

  afterAll(async () => {
    await docker
      .getVolume(target.storage)
      .remove()
      .catch(() => undefined);
  });

  it("adopts the volume the runner made and filled, keeping its files, and declares nothing else", async () => {
    // What the runner's copy does first: the volume from the same builder, then files in it.
    const inputs = snapshotVolumeInputs(target);
    await docker.createVolume({ Name: inputs.name, Labels: inputs.labels });
    await writeFileInVolume(target.storage, "kept.txt", "made before the recording");

    const storage = await manager.upSnapshot({ engine: "docker", target }, { recordOnly: true });

    expect(storage).toBe(target.storage);
    const volume = await docker.getVolume(target.storage).inspect();
    expect(volume.Labels?.[SnapshotLabels.snapshot]).toBe(name);
    expect(volume.Labels?.[SnapshotLabels.namespace]).toBe(namespace);
    expect(await readFileInVolume(target.storage, "kept.txt")).toBe("made before the recording");
    expect(await manager.snapshotExists(namespace, name)).toBe(true);
    const state = backendStateText(dataDir);
    expect(state).toContain(snapshotStackName(namespace, name));
    expect(state).not.toContain("agent-sessions:docker:Container");
    expect(state).not.toContain("agent-sessions:docker:Network");
  }, 180_000);

  it("destroys: the volume and the stack are gone; a second destroy finds nothing", async () => {
    expect(await manager.destroySnapshot(namespace, name)).toBe(true);
    await expect(docker.getVolume(target.storage).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect(await manager.snapshotExists(namespace, name)).toBe(false);
    expect(await manager.destroySnapshot(namespace, name)).toBe(false);
  }, 180_000);

  async function writeFileInVolume(volume: string, file: string, text: string): Promise<void> {
    await runInVolume(volume, ["/bin/sh", "-c", `printf %s "$0" > /v/${file}`, text], false);
  }
  async function readFileInVolume(volume: string, file: string): Promise<string> {
    return runInVolume(volume, ["/bin/cat", `/v/${file}`], true);
  }
  async function runInVolume(volume: string, cmd: string[], readOnly: boolean): Promise<string> {
    // The test bed's base image: the runner's git image (sh, cat).
    const container = await docker.createContainer({
      Image: builtImage("base-image").image,
      Entrypoint: [],
      Cmd: cmd,
      User: "0:0",
      HostConfig: {
        NetworkMode: "none",
        Mounts: [{ Type: "volume", Source: volume, Target: "/v", ReadOnly: readOnly }],
      },
    });
    try {
      const attached = (await container.attach({
        stream: true,
        stdout: true,
        stderr: true,
      })) as NodeJS.ReadableStream;
      const chunks: Buffer[] = [];
      const out = new (await import("node:stream")).PassThrough();
      out.on("data", (c: Buffer) => chunks.push(c));
      docker.modem.demuxStream(attached, out, process.stderr);
      await container.start();
      const { StatusCode } = (await container.wait()) as { StatusCode: number };
      if (StatusCode !== 0) throw new Error(`${cmd.join(" ")} exited ${StatusCode}`);
      await new Promise((r) => setTimeout(r, 50));
      return Buffer.concat(chunks).toString("utf8");
    } finally {
      await container.remove({ force: true }).catch(() => undefined);
    }
  }
});

describe("a Kubernetes snapshot's stack", () => {
  const name = uniqueName("ksnap");
  const kubernetesNamespace = "agent-sessions";
  const target = {
    storage: snapshotStorageName(namespace, name),
    namespace,
    name,
    kubernetes: { namespace: kubernetesNamespace },
  };
  let kube: KubeClients;
  const read = () =>
    kube.core.readNamespacedPersistentVolumeClaim({ name: target.storage, namespace: kubernetesNamespace });

  beforeAll(async () => {
    kube = await kubeClients();
    await ensureNamespace(kube.core, kubernetesNamespace);
  }, 60_000);

  afterAll(async () => {
    await kube?.core
      .deleteNamespacedPersistentVolumeClaim({ name: target.storage, namespace: kubernetesNamespace })
      .catch(() => undefined);
  });

  it("adopts the claim the runner applied (same object, same uid), and declares nothing else", async () => {
    const spec = { engine: "kubernetes" as const, target, storageRequest: "32Mi" };
    const made = await kube.core.createNamespacedPersistentVolumeClaim({
      namespace: kubernetesNamespace,
      body: snapshotPvcManifest(spec),
    });

    expect(await manager.upSnapshot(spec, { recordOnly: true })).toBe(target.storage);

    const claim = await read();
    expect(claim.metadata?.uid).toBe(made.metadata?.uid);
    expect(claim.metadata?.labels?.[SnapshotLabels.snapshot]).toBe(name);
    expect(claim.spec?.dataSource).toBeUndefined();
    const state = backendStateText(dataDir);
    expect(state).toContain("kubernetes:core/v1:PersistentVolumeClaim");
    expect(state).not.toContain("kubernetes:apps/v1:Deployment");
  }, 240_000);

  it("destroys: the claim and the stack are gone", async () => {
    expect(await manager.destroySnapshot(namespace, name)).toBe(true);
    expect(await isGone(read)).toBe(true);
    expect(await manager.snapshotExists(namespace, name)).toBe(false);
  }, 240_000);
});
