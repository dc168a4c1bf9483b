import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { SessionSpec } from "../../../contracts/session-spec.ts";
import type { ContainerInputs } from "./schema.ts";
import {
  containerCreateOptions,
  containerEnv,
  containerSecretEnv,
  containerSpecInputs,
  ensureSessionContainer,
  SPEC_HASH_LABEL,
  specHash,
} from "./session-container.ts";

const spec = SessionSpec.parse({
  namespace: "team",
  name: "chat",
  engine: "docker",
  image: `127.0.0.1:5000/agent@sha256:${"a".repeat(64)}`,
  contract: "v1alpha2",
  env: { MODEL_URL: "http://10.0.0.5:4000/v1" },
  egress: [{ cidr: "10.0.0.5/32", port: 4000 }],
});

function inputs(overrides: Partial<ContainerInputs> = {}): ContainerInputs {
  return {
    ...containerSpecInputs(spec),
    env: containerEnv(spec, "172.30.0.1"),
    secretEnv: containerSecretEnv({ MODEL_API_KEY: "sk-one" }, "token-one"),
    secretEnvHashKey: "state-hash-key-0123456789",
    ...overrides,
  };
}

describe("the one session-container builder", () => {
  it("an openai-chat harness: its own port, readiness on /healthz, the contract version in its env; ours unchanged", () => {
    const harness = SessionSpec.parse({ ...spec, session: { protocol: "openai-chat", port: 9090 } });
    expect(containerSpecInputs(harness)).toMatchObject({ adapterPort: 9090, readyPath: "/healthz" });
    expect(containerEnv(harness, "172.30.0.1")).toMatchObject({
      ADAPTER_PORT: "9090",
      SYMPOZIUM_HARNESS_CONTRACT_VERSION: "v1alpha2",
    });
    // Our adapter's container is declared as before (its spec hash, hence no replacement).
    expect(containerSpecInputs(spec).adapterPort).toBe(8080);
    expect("readyPath" in containerSpecInputs(spec)).toBe(false);
    expect(containerEnv(spec, "172.30.0.1")).not.toHaveProperty("SYMPOZIUM_HARNESS_CONTRACT_VERSION");
  });

  it("names the workspace volume, the session network and the gateway the program declares", () => {
    const i = inputs();
    expect(i.name).toBe("as-team-chat");
    expect(i.networkMode).toBe("as-team-chat-net");
    expect(i.mounts).toContainEqual({
      type: "volume",
      source: "as-team-chat-workspace",
      target: "/workspace",
    });
    expect(i.env.MODEL_URL).toBe("http://172.30.0.1:4000/v1");
    expect(i.secretEnv).toEqual({ MODEL_API_KEY: "sk-one", ADAPTER_TOKEN: "token-one" });
    expect(i.user).toBe("65532:65532");
    expect(i.capDrop).toEqual(["ALL"]);
  });

  it("labels the container with a spec hash that any changed input changes, the state's key not", () => {
    const base = specHash(inputs());
    expect(containerCreateOptions(inputs(), []).Labels?.[SPEC_HASH_LABEL]).toBe(base);
    expect(specHash(inputs({ secretEnvHashKey: "another-state-key-0123456789" }))).toBe(base);
    expect(specHash(inputs({ memoryBytes: 1 << 30 }))).not.toBe(base);
    expect(specHash(inputs({ env: containerEnv(spec, "172.30.0.9") }))).not.toBe(base);
    expect(
      specHash(inputs({ secretEnv: containerSecretEnv({ MODEL_API_KEY: "sk-two" }, "token-one") })),
    ).not.toBe(base);
  });

  it("keeps the credentials out of the label: it is keyed by the adapter token", () => {
    const label = specHash(inputs());
    expect(label).toMatch(/^[0-9a-f]{64}$/);
    expect(label).not.toContain("sk-one");
    expect(
      specHash(inputs({ secretEnv: containerSecretEnv({ MODEL_API_KEY: "sk-one" }, "token-two") })),
    ).not.toBe(label);
  });
});

describe("ensureSessionContainer recording only (adoptOnly)", () => {
  /** A dockerode stand-in: the named container as `found` (undefined: 404), every write counted. */
  function engine(found: { running: boolean; hash: string } | undefined) {
    const writes: string[] = [];
    const docker = {
      getContainer: () => ({
        inspect: async () => {
          if (!found) throw Object.assign(new Error("no such container"), { statusCode: 404 });
          return { State: { Running: found.running }, Config: { Labels: { [SPEC_HASH_LABEL]: found.hash } } };
        },
        remove: async () => void writes.push("remove"),
      }),
      createContainer: async () => {
        writes.push("create");
        throw new Error("made");
      },
      getImage: () => ({ inspect: async () => ({}) }),
    };
    return { docker: docker as unknown as Docker, writes };
  }

  it("never makes, removes or replaces a container: gone, exited or of other inputs fails the create", async () => {
    for (const found of [
      undefined,
      { running: false, hash: specHash(inputs()) },
      { running: true, hash: "other-inputs" },
    ]) {
      const { docker, writes } = engine(found);
      await expect(ensureSessionContainer(docker, inputs(), 1000, { adoptOnly: true })).rejects.toThrow(
        /not running as declared.*recording only, nothing made/,
      );
      expect(writes).toEqual([]);
    }
  });

  it("without it, a container that is gone is made (the full path)", async () => {
    const { docker, writes } = engine(undefined);
    await expect(ensureSessionContainer(docker, inputs(), 1000)).rejects.toThrow("made");
    expect(writes).toEqual(["create"]);
  });
});
