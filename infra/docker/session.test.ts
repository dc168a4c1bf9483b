import { beforeAll, describe, expect, it } from "vitest";
import { SessionSpec } from "../../contracts/session-spec.ts";
import { custom, installMocks, outputValue, type Recorded } from "../test-mocks.ts";

const image = `127.0.0.1:5000/agent-sessions/reference@sha256:${"a".repeat(64)}`;
const spec = (over: Record<string, unknown> = {}) =>
  SessionSpec.parse({
    namespace: "default",
    name: "alpha",
    engine: "docker",
    image,
    contract: "v1alpha2",
    egress: [{ cidr: "10.213.0.1", port: 11434 }],
    env: { MODEL_BASE_URL: "http://10.213.0.1:11434/v1" },
    ...over,
  });

let recorded: Recorded[];
let mod: typeof import("./session.ts");
beforeAll(async () => {
  recorded = installMocks();
  // Import after setMocks: resources must be constructed with the mocks in place.
  mod = await import("./session.ts");
});

describe("DockerSession component", () => {
  it("registers a volume, an isolated internal network and a hardened, digest-pinned container", async () => {
    recorded.length = 0;
    const s = new mod.DockerSession("alpha", {
      spec: spec(),
      credentials: { MODEL_API_KEY: "sk-1" },
      adapterToken: "tok",
      stateHashKey: "state-hash-key-0123456789",
    });
    expect(await outputValue(s.endpoint)).toBe("172.30.0.2:8080");
    const types = custom(recorded)
      .map((r) => r.type)
      .sort();
    expect(types).toEqual([
      "agent-sessions-docker:index:Container",
      "agent-sessions-docker:index:Network",
      "agent-sessions-docker:index:Volume",
    ]);
    const network = recorded.find((r) => r.type.endsWith("Network"))!;
    expect(network.inputs).toMatchObject({
      internal: true,
      isolateFromHost: true,
      allowedEgress: [{ address: "10.213.0.1", port: 11434 }],
    });
    const container = recorded.find((r) => r.type.endsWith("Container"))!;
    expect(container.inputs).toMatchObject({
      image,
      user: "65532:65532",
      readOnlyRootfs: true,
      privileged: false,
      capDrop: ["ALL"],
      capAdd: [],
      securityOpt: ["no-new-privileges"],
      networkMode: "as-default-alpha-net",
      memoryBytes: 512 * 1024 * 1024,
      nanoCpus: 500_000_000,
      pidsLimit: 512,
    });
    expect(container.inputs.mounts).toEqual([
      { type: "volume", source: "as-default-alpha-workspace", target: "/workspace" },
      { type: "tmpfs", target: "/tmp", sizeBytes: 64 * 1024 * 1024 },
    ]);
    // The model URL is rewritten to the gateway, the only address an internal network reaches.
    expect((container.inputs.env as Record<string, string>).MODEL_BASE_URL).toBe(
      "http://172.30.0.1:11434/v1",
    );
    // Credentials travel as secret env, never in plain env.
    expect(container.inputs.env).not.toHaveProperty("MODEL_API_KEY");
    expect(await outputValue(s.resolvedImageDigest)).toBe(`sha256:${"a".repeat(64)}`);
  });

  it("declares no container at scale 0 and keeps the volume", async () => {
    recorded.length = 0;
    const s = new mod.DockerSession("beta", {
      spec: spec({ name: "beta", replicas: 0 }),
      credentials: {},
      adapterToken: "tok",
      stateHashKey: "state-hash-key-0123456789",
    });
    expect(await outputValue(s.endpoint)).toBe("");
    await outputValue(s.volumeName);
    expect(
      custom(recorded)
        .map((r) => r.type)
        .sort(),
    ).toEqual(["agent-sessions-docker:index:Network", "agent-sessions-docker:index:Volume"]);
  });

  it("rewrites only URLs naming an allowed endpoint", () => {
    expect(mod.viaGateway("http://10.0.0.9:1/v1", [{ cidr: "10.213.0.1", port: 11434 }], "172.30.0.1")).toBe(
      "http://10.0.0.9:1/v1",
    );
  });
});
