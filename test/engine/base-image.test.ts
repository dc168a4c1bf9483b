/**
 * The session base image (scripts/testbed.d/base-image.sh), run the way every session workload
 * is run: as uid 65532, read-only root, no capabilities, no new privileges, a volume on
 * /workspace and a tmpfs on /tmp. What a harness's tools need is there; nothing else is writable.
 */
import Docker from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { applyTestbedEnv, builtImage, registry } from "../support/testbed.ts";

applyTestbedEnv();
const docker = new Docker({ socketPath: (process.env.DOCKER_HOST ?? "").replace(/^unix:\/\//, "") });
const volume = `as-base-image-test-${process.pid}`;

afterAll(async () => {
  await docker
    .getVolume(volume)
    .remove({ force: true })
    .catch(() => undefined);
});

/** Runs `script` with bash in the base image, hardened as a session; its output and exit code. */
async function run(script: string): Promise<{ code: number; output: string }> {
  const container = await docker.createContainer({
    Image: builtImage("base-image").image,
    Cmd: ["bash", "-c", script],
    Tty: true,
    NetworkDisabled: true,
    HostConfig: {
      ReadonlyRootfs: true,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Tmpfs: { "/tmp": "" },
      Mounts: [{ Type: "volume", Source: volume, Target: "/workspace" }],
    },
  });
  try {
    await container.start();
    const { StatusCode } = (await container.wait()) as { StatusCode: number };
    const output = (await container.logs({ stdout: true, stderr: true })).toString("utf8");
    return { code: StatusCode, output };
  } finally {
    await container.remove({ force: true });
  }
}

describe("session base image (Debian packages, docker import)", () => {
  it("is in the local registry under the digest the test bed recorded", async () => {
    const base = builtImage("base-image");
    const head = await fetch(`http://${registry}/v2/agent-sessions/base/manifests/${base.tag}`, {
      method: "HEAD",
      headers: { accept: "application/vnd.docker.distribution.manifest.v2+json" },
    });
    expect(head.status).toBe(200);
    expect(head.headers.get("docker-content-digest")).toBe(base.digest);
  });

  it("starts as uid 65532 in /workspace with a shell, coreutils, git and CA certificates", async () => {
    const { code, output } = await run(
      "id -u; id -g; pwd; echo $HOME; git --version; ls /etc/ssl/certs/ca-certificates.crt; sort --version | head -1",
    );
    expect(code).toBe(0);
    const lines = output.split(/\r?\n/);
    expect(lines.slice(0, 4)).toEqual(["65532", "65532", "/workspace", "/workspace"]);
    expect(output).toMatch(/git version 2\.\d+/);
    expect(output).toContain("/etc/ssl/certs/ca-certificates.crt");
    expect(output).toMatch(/sort \(GNU coreutils\)/);
  });

  it("writes only /workspace and /tmp: the root is read-only and nothing is setuid", async () => {
    const { code, output } = await run(
      [
        "echo kept >/workspace/probe && cat /workspace/probe",
        "echo scratch >/tmp/probe && cat /tmp/probe",
        "for d in / /usr /etc /var /home; do touch $d/probe 2>/dev/null && echo WROTE $d; done",
        "echo setuid: $(find / -xdev -type f -perm /6000 | wc -l)",
      ].join("; "),
    );
    expect(code).toBe(0);
    expect(output).toContain("kept");
    expect(output).toContain("scratch");
    expect(output).not.toContain("WROTE");
    expect(output).toContain("setuid: 0");
  });
});
