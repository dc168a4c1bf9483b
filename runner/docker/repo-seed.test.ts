import { describe, expect, it } from "vitest";
import { gitContainerOptions } from "./repo-seed.ts";
import { gitError } from "../engine/repo-scripts.ts";

const IMAGE = `127.0.0.1:5000/agent-sessions/base@sha256:${"a".repeat(64)}`;

describe("the git container of a repository seed and diff", () => {
  it("is hardened like a session: non-root, read-only root, no capabilities, only the session volume and a tmpfs", () => {
    const seed = gitContainerOptions({
      image: IMAGE,
      base: "as-default-s-1234",
      script: "true",
      env: ["SEED_URL=http://10.1.0.1:8418/a.git"],
      network: "as-default-s-1234-net",
      readOnly: false,
    });
    expect(seed.Image).toBe(IMAGE);
    expect(seed.User).toBe("65532:65532");
    expect(seed.HostConfig).toMatchObject({
      ReadonlyRootfs: true,
      Privileged: false,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      NetworkMode: "as-default-s-1234-net",
    });
    expect(seed.HostConfig?.Binds).toBeUndefined();
    expect(seed.HostConfig?.Mounts).toEqual([
      { Type: "volume", Source: "as-default-s-1234-workspace", Target: "/workspace", ReadOnly: false },
      expect.objectContaining({ Type: "tmpfs", Target: "/tmp" }),
    ]);
    const diff = gitContainerOptions({
      image: IMAGE,
      base: "as-default-s-1234",
      script: "true",
      env: [],
      network: "none",
      readOnly: true,
    });
    expect(diff.HostConfig?.NetworkMode).toBe("none");
    expect(diff.HostConfig?.Mounts?.[0]).toMatchObject({ Type: "volume", ReadOnly: true });
  });

  it("git's error names the user's URL, never a credential or a URL's user part", () => {
    const text =
      "fatal: repository 'http://10.0.0.1:8418/x.git/' not found\nfatal: auth tok3n failed for http://git:tok3n@10.0.0.9/x.git\n";
    const said = gitError(text, ["tok3n"], "http://10.0.0.1:8418", "http://10.213.0.1:8418");
    expect(said).toBe(
      "fatal: repository 'http://10.213.0.1:8418/x.git/' not found; fatal: auth *** failed for http://10.0.0.9/x.git",
    );
  });
});
