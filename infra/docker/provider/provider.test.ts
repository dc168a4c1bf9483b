import { createHash } from "node:crypto";
import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { containerCreateOptions, DockerSessionProvider, revealSecrets, secretEnvHash } from "./provider.ts";
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

  it("keeps a keyed hash of secretEnv in state: equal credentials under two stacks' keys hash apart, never a plain sha256", () => {
    const secretEnv = { MODEL_API_KEY: "sk-same", ADAPTER_TOKEN: "t" };
    const a = secretEnvHash(secretEnv, "key-of-stack-a-0123456789");
    const b = secretEnvHash(secretEnv, "key-of-stack-b-0123456789");
    expect(a).toMatch(/^hmac-sha256:[0-9a-f]{64}$/);
    expect(a).not.toBe(b);
    const unkeyed = createHash("sha256").update(JSON.stringify(secretEnv)).digest("hex");
    expect(a).not.toContain(unkeyed);
    expect(secretEnvHash(secretEnv, "key-of-stack-a-0123456789")).toBe(a);
  });

  it("a changed credential replaces the container, an unchanged one does not", async () => {
    const provider = new DockerSessionProvider({} as Docker);
    const key = "key-of-this-stack-0123456789";
    const secretEnv = { MODEL_API_KEY: "sk-1", ADAPTER_TOKEN: "t" };
    const stored = { name: "c", secretEnvHash: secretEnvHash(secretEnv, key), containerId: "id" };
    const news = (env: Record<string, string>) => ({
      name: "c",
      secretEnv: secret(env),
      secretEnvHashKey: secret(key),
    });
    expect(await provider.diff("id", urn, stored, news(secretEnv))).toMatchObject({ changes: false });
    expect(
      await provider.diff("id", urn, stored, news({ ...secretEnv, MODEL_API_KEY: "sk-2" })),
    ).toMatchObject({
      changes: true,
      replaces: ["secretEnvHash"],
    });
    expect(
      await provider.diff("id", urn, stored, news({ ...secretEnv, ADAPTER_TOKEN: "rotated" })),
    ).toMatchObject({
      changes: true,
      replaces: ["secretEnvHash"],
    });
  });

  it("moves a stack's old unkeyed hash to the keyed one in place: no container roll when nothing changed", async () => {
    const provider = new DockerSessionProvider({} as Docker);
    const key = "key-of-this-stack-0123456789";
    const secretEnv = { ADAPTER_TOKEN: "t" };
    const legacy = {
      name: "c",
      secretEnvHash: createHash("sha256").update(JSON.stringify(secretEnv)).digest("hex"),
      containerId: "id",
    };
    const news = { name: "c", secretEnv: secret(secretEnv), secretEnvHashKey: secret(key) };
    const diff = await provider.diff("id", urn, legacy, news);
    expect(diff).toMatchObject({ changes: true, replaces: [] });
    const updated = await provider.update("id", urn, legacy, news);
    expect(updated.outs).toEqual({
      name: "c",
      containerId: "id",
      secretEnvHash: secretEnvHash(secretEnv, key),
    });
    expect(JSON.stringify(updated.outs)).not.toContain(key);
    // A changed credential on an old stack still replaces it.
    expect(
      await provider.diff("id", urn, legacy, { ...news, secretEnv: secret({ ADAPTER_TOKEN: "other" }) }),
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
        secretEnvHashKey: "fixture-hash-key-0123456789",
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
