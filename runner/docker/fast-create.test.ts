import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { SessionSpec } from "../../contracts/session-spec.ts";
import { DockerTypes } from "../../infra/docker/provider/schema.ts";
import { judgeAll } from "../../policies/judge.ts";
import { ourPackConfig } from "../../stacks/policy-pack-config.ts";
import { dockerSessionResources, fastContainerInputs, fastCreateDocker } from "./fast-create.ts";

const digest = `sha256:${"a".repeat(64)}`;
const spec = SessionSpec.parse({
  namespace: "team",
  name: "s1",
  engine: "docker",
  image: `127.0.0.1:5000/agent-sessions/reference@${digest}`,
  contract: "v1alpha2",
  env: { MODEL_BASE_URL: "http://10.213.0.1:11434/v1" },
  egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
});
const secrets = { credentials: { MODEL_API_KEY: "sk-live-secret" }, adapterToken: "token-0123456789abcdef" };

/** The pack itself, in process, as StackManager.judge runs it for a stack with only our pack. */
const ourPack = {
  judge: (s: SessionSpec, resources: { type: string; name: string; props: object }[]) =>
    judgeAll(resources, ourPackConfig(undefined, s)),
};

/** A Docker client that fails the test on any use: a declined fast create must not touch the engine. */
function untouchable(): { docker: Docker; touched: string[] } {
  const touched: string[] = [];
  const docker = new Proxy({} as Docker, {
    get(_t, prop) {
      touched.push(String(prop));
      throw new Error(`the engine was touched (${String(prop)})`);
    },
  });
  return { docker, touched };
}

describe("the Docker fast create", () => {
  it("judges exactly the volume, network and container the stack's program declares, and the pack passes them", async () => {
    const resources = dockerSessionResources(spec, fastContainerInputs(spec, secrets, "172.30.0.1"));
    expect(resources.map((r) => r.type)).toEqual([
      DockerTypes.volume,
      DockerTypes.network,
      DockerTypes.container,
    ]);
    const [volume, network, container] = resources.map((r) => r.props as unknown as Record<string, unknown>);
    expect(container?.networkMode).toBe(network?.name);
    expect(container?.mounts).toContainEqual({ type: "volume", source: volume?.name, target: "/workspace" });
    // The credential goes as a secret input, the endpoint through the network's gateway.
    expect(container?.secretEnv).toMatchObject({ MODEL_API_KEY: "sk-live-secret" });
    expect(JSON.stringify(container?.env)).not.toContain("sk-live-secret");
    expect(container?.env).toHaveProperty("MODEL_BASE_URL");
    expect((container?.env as Record<string, string> | undefined)?.MODEL_BASE_URL).toBe(
      "http://172.30.0.1:11434/v1",
    );
    expect(await ourPack.judge(spec, resources)).toEqual([]);
  });

  it("declines without touching the engine when the pack refuses the session (an image from an unapproved registry)", async () => {
    const { docker, touched } = untouchable();
    const logged: string[] = [];
    const refused = { ...spec, image: `registry.example.com/agent@${digest}` };
    const made = await fastCreateDocker(docker, ourPack, refused, secrets, (_level, msg, fields) =>
      logged.push(`${msg} ${JSON.stringify(fields ?? {})}`),
    );
    expect(made).toBeUndefined();
    expect(touched).toEqual([]);
    expect(logged.join("\n")).toContain("image-from-approved-registry");
    expect(logged.join("\n")).not.toContain("sk-live-secret");
  });

  it("declines without touching the engine when the attached packs cannot be judged in process", async () => {
    const { docker, touched } = untouchable();
    const logged: string[] = [];
    const made = await fastCreateDocker(docker, { judge: async () => undefined }, spec, secrets, (_l, msg) =>
      logged.push(msg),
    );
    expect(made).toBeUndefined();
    expect(touched).toEqual([]);
    expect(logged).toEqual(["fast create declined: the attached policy packs cannot be judged in process"]);
  });
});
