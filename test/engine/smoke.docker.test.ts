import Docker from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { applyTestbedEnv, referenceImage, registry } from "../support/testbed.ts";

applyTestbedEnv();
const docker = new Docker({ socketPath: (process.env.DOCKER_HOST ?? "").replace(/^unix:\/\//, "") });
const created: Docker.Container[] = [];

afterAll(async () => {
  for (const c of created) await c.remove({ force: true }).catch(() => undefined);
});

describe("docker engine and registry (real)", () => {
  it("runs a container from the registry by digest, and the digest is the registry's", async () => {
    const ref = referenceImage();
    // Ask the registry itself which digest the tag points at.
    const head = await fetch(`http://${registry}/v2/agent-sessions/reference/manifests/${ref.tag}`, {
      method: "HEAD",
      headers: { accept: "application/vnd.docker.distribution.manifest.v2+json" },
    });
    expect(head.status).toBe(200);
    const registryDigest = head.headers.get("docker-content-digest");
    expect(registryDigest).toBe(ref.digest);

    const container = await docker.createContainer({
      Image: ref.image,
      Env: ["ADAPTER_TOKEN=smoke"],
      HostConfig: {
        ReadonlyRootfs: true,
        CapDrop: ["ALL"],
        SecurityOpt: ["no-new-privileges"],
        Tmpfs: { "/tmp": "" },
      },
    });
    created.push(container);
    await container.start();
    const info = await container.inspect();
    expect(info.State.Running).toBe(true);
    expect(info.Config.Image).toBe(`${ref.repository}@${registryDigest}`);
    const image = await docker.getImage(info.Image).inspect();
    expect(image.RepoDigests).toContain(`${ref.repository}@${registryDigest}`);
  });

  it("refuses a digest the registry does not have", async () => {
    const ref = referenceImage();
    const wrong = `${ref.repository}@sha256:${"0".repeat(64)}`;
    const pull = async () => {
      const stream = (await docker.pull(wrong)) as NodeJS.ReadableStream;
      await new Promise((resolve, reject) =>
        docker.modem.followProgress(stream, (e) => (e ? reject(e) : resolve(undefined))),
      );
    };
    await expect(pull()).rejects.toThrow(/manifest unknown|not found/i);
  });
});
