import { createHash } from "node:crypto";
import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { containerCreateOptions, DockerSessionProvider, revealSecrets } from "./provider.ts";
import { DockerTypes } from "./schema.ts";

/** How the engine hands a secret to a provider that accepts secrets (@pulumi/pulumi runtime/rpc). */
const secret = (value: unknown) => ({
  "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
  value,
});
const urn = `urn:pulumi:s::agent-sessions::agent-sessions:docker:Session$${DockerTypes.container}::c`;

describe("Docker provider secret inputs", () => {
  it("reveals secrets wrapped at any depth, leaving other values alone", () => {
    expect(
      revealSecrets({
        env: { A: "1" },
        secretEnv: secret({ API_KEY: "k", NESTED: secret("n") }),
        list: [secret(1)],
      }),
    ).toEqual({ env: { A: "1" }, secretEnv: { API_KEY: "k", NESTED: "n" }, list: [1] });
  });

  it("sees no change when the wrapped secretEnv hashes like the one stored at create", async () => {
    const provider = new DockerSessionProvider({} as Docker);
    const secretEnv = { ADAPTER_TOKEN: "t" };
    const stored = {
      name: "c",
      secretEnvHash: createHash("sha256").update(JSON.stringify(secretEnv)).digest("hex"),
      containerId: "id",
    };
    expect(await provider.diff("id", urn, stored, { name: "c", secretEnv: secret(secretEnv) })).toMatchObject(
      {
        changes: false,
      },
    );
    expect(
      await provider.diff("id", urn, stored, { name: "c", secretEnv: secret({ ADAPTER_TOKEN: "rotated" }) }),
    ).toMatchObject({ changes: true, replaces: ["secretEnvHash"] });
  });
});

describe("Docker session containers", () => {
  it("cap the container log (json-file, rotated), so an agent cannot fill the engine's disk", () => {
    const options = containerCreateOptions(
      {
        name: "c",
        image: `127.0.0.1:5000/x@sha256:${"a".repeat(64)}`,
        env: {},
        secretEnv: {},
        user: "65532:65532",
        readOnlyRootfs: true,
        privileged: false,
        capDrop: ["ALL"],
        capAdd: [],
        securityOpt: ["no-new-privileges"],
        networkMode: "n",
        mounts: [],
        memoryBytes: 1 << 29,
        nanoCpus: 1e9,
        pidsLimit: 256,
        labels: {},
        adapterPort: 8080,
      },
      [],
    );
    expect(options.HostConfig?.LogConfig).toEqual({
      Type: "json-file",
      Config: { "max-size": "2097152", "max-file": "2" },
    });
  });
});
