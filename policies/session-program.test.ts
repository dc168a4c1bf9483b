import { beforeAll, describe, expect, it, vi } from "vitest";
import { SessionSpec } from "../contracts/session-spec.ts";
import { custom, installMocks, type Recorded } from "../infra/test-mocks.ts";
import type { FakeResource } from "./testing/policy-harness.ts";
import { resourceViolations, stackViolations } from "./testing/policy-harness.ts";

// The pack and the session components must agree: what infra/ declares for a session, on either
// engine, passes every policy. Resources are recorded through Pulumi mocks (constructed after
// setMocks, hence the dynamic imports) and judged as the engine would judge their inputs.

let recorded: Recorded[];
let components: {
  docker: typeof import("../infra/docker/session.ts");
  kubernetes: typeof import("../infra/kubernetes/session.ts");
};

beforeAll(async () => {
  recorded = installMocks();
  components = {
    docker: await import("../infra/docker/session.ts"),
    kubernetes: await import("../infra/kubernetes/session.ts"),
  };
});

const sessionSpec = (engine: "docker" | "kubernetes") =>
  SessionSpec.parse({
    namespace: "default",
    name: "alpha",
    engine,
    image: `127.0.0.1:5000/agent-sessions/reference@sha256:${"c".repeat(64)}`,
    contract: "v1alpha2",
    egress: [{ cidr: "10.213.0.1", port: 11434 }],
    env: { MODEL_BASE_URL: "http://10.213.0.1:11434/v1" },
  });

/** Waits until the component has registered exactly `types`, then judges those resources. */
async function violationsOnceRegistered(types: string[]) {
  // Registration is asynchronous (outputs feed later resources), so poll the recorded calls.
  await vi.waitFor(() =>
    expect(
      custom(recorded)
        .map((r) => r.type)
        .sort(),
    ).toEqual(types),
  );
  const stack: FakeResource[] = custom(recorded).map((r) => ({
    type: r.type,
    name: r.name,
    props: r.inputs,
  }));
  const perResource = await Promise.all(stack.map((r) => resourceViolations(r)));
  return [...perResource.flat(), ...(await stackViolations(stack))];
}

describe("the session components under the pack", () => {
  it("a Kubernetes session passes every policy", async () => {
    recorded.length = 0;
    new components.kubernetes.KubernetesSession("alpha", {
      spec: sessionSpec("kubernetes"),
      credentials: { MODEL_API_KEY: "sk-1" },
      adapterToken: "tok",
    });
    const violations = await violationsOnceRegistered([
      "kubernetes:apps/v1:Deployment",
      "kubernetes:core/v1:PersistentVolumeClaim",
      "kubernetes:core/v1:Secret",
      "kubernetes:core/v1:Service",
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    ]);
    expect(violations).toEqual([]);
  });

  it("a Kubernetes session with its workspace sidecar passes every policy", async () => {
    recorded.length = 0;
    const spec = sessionSpec("kubernetes");
    new components.kubernetes.KubernetesSession("alpha", {
      spec: {
        ...spec,
        kubernetes: {
          ...spec.kubernetes,
          workspaceImage: `127.0.0.1:5000/agent-sessions/base@sha256:${"d".repeat(64)}`,
        },
      },
      credentials: { MODEL_API_KEY: "sk-1" },
      adapterToken: "tok",
    });
    const violations = await violationsOnceRegistered([
      "kubernetes:apps/v1:Deployment",
      "kubernetes:core/v1:PersistentVolumeClaim",
      "kubernetes:core/v1:Secret",
      "kubernetes:core/v1:Service",
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    ]);
    expect(violations).toEqual([]);
  });

  it("a running Docker session passes every policy", async () => {
    recorded.length = 0;
    new components.docker.DockerSession("alpha", {
      spec: sessionSpec("docker"),
      credentials: { MODEL_API_KEY: "sk-1" },
      adapterToken: "tok",
      stateHashKey: "state-hash-key-0123456789",
    });
    const violations = await violationsOnceRegistered([
      "agent-sessions-docker:index:Container",
      "agent-sessions-docker:index:Network",
      "agent-sessions-docker:index:Volume",
    ]);
    expect(violations).toEqual([]);
  });
});
