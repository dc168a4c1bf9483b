import { describe, expect, it } from "vitest";
import type { PodSpec } from "./judged-resources.ts";
import { agent, deployment, pod } from "./testing/kubernetes-fixtures.ts";
import { type FakeResource, resourceViolations, violatedBy } from "./testing/policy-harness.ts";

type Workload = (change?: (pod: PodSpec) => void) => FakeResource;

// Every pod-spec rule holds for a Deployment's pod template and for a bare Pod alike.
describe.each<[string, Workload]>([
  ["Deployment", deployment],
  ["Pod", pod],
])("a Kubernetes %s", (_, workload) => {
  it("passes every policy as the baseline declares it", async () => {
    expect(await violatedBy(workload())).toEqual([]);
  });

  describe("images", () => {
    it("a tagged image violates image-pinned-by-digest", async () => {
      const violations = await resourceViolations(
        workload((spec) => {
          agent(spec).image = "127.0.0.1:5000/agent-sessions/reference:latest";
        }),
      );
      expect(violations).toEqual([
        {
          policy: "image-pinned-by-digest",
          message:
            'container "agent" image "127.0.0.1:5000/agent-sessions/reference:latest" is not pinned by digest (expected repo@sha256:<64 hex>)',
        },
      ]);
    });

    it("a tagged init container image violates image-pinned-by-digest", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          spec.initContainers![0]!.image = "127.0.0.1:5000/agent-sessions/reference:v1";
        }),
      );
      expect(violated).toEqual(["image-pinned-by-digest"]);
    });

    it("a short digest violates image-pinned-by-digest", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).image = "127.0.0.1:5000/agent-sessions/reference@sha256:0123abcd";
        }),
      );
      expect(violated).toEqual(["image-pinned-by-digest"]);
    });

    it.each([
      ["another registry", `ghcr.io/agent-sessions/reference@sha256:${"ab".repeat(32)}`],
      ["Docker Hub (no registry named)", `library/busybox@sha256:${"ab".repeat(32)}`],
      ["the approved host on another port", `127.0.0.1:5001/reference@sha256:${"ab".repeat(32)}`],
    ])("an image from %s violates image-from-approved-registry", async (_, image) => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).image = image;
        }),
      );
      expect(violated).toEqual(["image-from-approved-registry"]);
    });

    it("the approved registries come from the policy config", async () => {
      const config = { "image-from-approved-registry": { approvedRegistries: ["registry.example.com"] } };
      const elsewhere = workload((spec) => {
        for (const container of [...spec.containers, ...(spec.initContainers ?? [])]) {
          container.image = `registry.example.com/reference@sha256:${"ab".repeat(32)}`;
        }
      });
      expect(await violatedBy(elsewhere, config)).toEqual([]);
      expect(await violatedBy(workload(), config)).toEqual(["image-from-approved-registry"]);
    });
  });

  describe("the pod", () => {
    it.each([
      ["left unset", undefined],
      ["true", true],
    ])("automountServiceAccountToken %s violates no-service-account-token", async (_, value) => {
      const violated = await violatedBy(
        workload((spec) => {
          spec.automountServiceAccountToken = value;
        }),
      );
      expect(violated).toEqual(["no-service-account-token"]);
    });

    it.each(["hostNetwork", "hostPID", "hostIPC"] as const)(
      "%s violates no-host-namespaces",
      async (field) => {
        const violated = await violatedBy(
          workload((spec) => {
            spec[field] = true;
          }),
        );
        expect(violated).toEqual(["no-host-namespaces"]);
      },
    );

    it("a host port violates no-host-namespaces", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).ports = [{ containerPort: 8080, hostPort: 8080 }];
        }),
      );
      expect(violated).toEqual(["no-host-namespaces"]);
    });

    it.each([
      ["hostPath", { hostPath: { path: "/var/run/docker.sock" } }],
      ["configMap", { configMap: { name: "settings" } }],
      ["secret", { secret: { secretName: "demo-credentials" } }],
      [
        "projected service account token",
        { projected: { sources: [{ serviceAccountToken: { path: "token" } }] } },
      ],
    ])("a %s volume violates narrowed-mounts", async (_, source) => {
      const violated = await violatedBy(
        workload((spec) => {
          spec.volumes!.push({ name: "extra", ...source });
        }),
      );
      expect(violated).toEqual(["narrowed-mounts"]);
    });
  });

  describe("the skills mount (issue 39)", () => {
    const withSkills = (change: (spec: PodSpec) => void = () => undefined) =>
      workload((spec) => {
        spec.volumes!.push({
          name: "skills",
          configMap: { name: "demo-skills", defaultMode: 0o444, items: [{ key: "p.s.md", path: "p/s.md" }] },
        });
        agent(spec).volumeMounts!.push({ name: "skills", mountPath: "/skills", readOnly: true });
        change(spec);
      });

    it("a configMap named skills, 0444, mounted read-only at /skills, violates nothing", async () => {
      expect(await violatedBy(withSkills())).toEqual([]);
    });

    it.each<[string, (spec: PodSpec) => void]>([
      [
        "mounted writable",
        (spec) => {
          agent(spec).volumeMounts!.at(-1)!.readOnly = false;
        },
      ],
      [
        "mounted elsewhere",
        (spec) => {
          agent(spec).volumeMounts!.at(-1)!.mountPath = "/workspace/skills";
        },
      ],
      [
        "mode 0644",
        (spec) => {
          (spec.volumes!.at(-1)!.configMap as { defaultMode: number }).defaultMode = 0o644;
        },
      ],
      [
        "an executable item",
        (spec) => {
          (spec.volumes!.at(-1)!.configMap as { items: { mode?: number }[] }).items[0]!.mode = 0o555;
        },
      ],
      [
        "the workspace at /skills",
        (spec) => {
          agent(spec).volumeMounts!.push({ name: "workspace", mountPath: "/skills/w" });
        },
      ],
    ])("the skills mount %s violates narrowed-mounts", async (_, change) => {
      expect(await violatedBy(withSkills(change))).toEqual(["narrowed-mounts"]);
    });
  });

  describe("container security", () => {
    it("a privileged container violates no-privileged-containers", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.privileged = true;
        }),
      );
      expect(violated).toEqual(["no-privileged-containers"]);
    });

    it("a privileged init container violates no-privileged-containers", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          spec.initContainers![0]!.securityContext!.privileged = true;
        }),
      );
      expect(violated).toEqual(["no-privileged-containers"]);
    });

    it("allowPrivilegeEscalation left unset violates no-privilege-escalation", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          delete agent(spec).securityContext!.allowPrivilegeEscalation;
        }),
      );
      expect(violated).toEqual(["no-privilege-escalation"]);
    });

    it("not dropping ALL capabilities violates capabilities-dropped", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.capabilities = { drop: ["NET_RAW"] };
        }),
      );
      expect(violated).toEqual(["capabilities-dropped"]);
    });

    it("adding a capability violates capabilities-dropped", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.capabilities = { drop: ["ALL"], add: ["NET_BIND_SERVICE"] };
        }),
      );
      expect(violated).toEqual(["capabilities-dropped"]);
    });

    it("runAsNonRoot set on neither pod nor container violates run-as-non-root", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          delete spec.securityContext!.runAsNonRoot;
        }),
      );
      expect(violated).toEqual(["run-as-non-root"]);
    });

    it("a container overriding runAsNonRoot with false violates run-as-non-root", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.runAsNonRoot = false;
        }),
      );
      expect(violated).toEqual(["run-as-non-root"]);
    });

    it("runAsUser 0 violates run-as-non-root", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.runAsUser = 0;
        }),
      );
      expect(violated).toEqual(["run-as-non-root"]);
    });

    it("runAsNonRoot on the container alone satisfies run-as-non-root", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          delete spec.securityContext!.runAsNonRoot;
          for (const container of [...spec.containers, ...(spec.initContainers ?? [])]) {
            container.securityContext!.runAsNonRoot = true;
          }
        }),
      );
      expect(violated).toEqual([]);
    });

    it("a writable root filesystem violates read-only-root-filesystem", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.readOnlyRootFilesystem = false;
        }),
      );
      expect(violated).toEqual(["read-only-root-filesystem"]);
    });

    it("no seccomp profile on pod or container violates seccomp-runtime-default", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          delete spec.securityContext!.seccompProfile;
        }),
      );
      expect(violated).toEqual(["seccomp-runtime-default"]);
    });

    it("a container overriding seccomp with Unconfined violates seccomp-runtime-default", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).securityContext!.seccompProfile = { type: "Unconfined" };
        }),
      );
      expect(violated).toEqual(["seccomp-runtime-default"]);
    });
  });

  describe("what containers are given", () => {
    it("a literal API key in env violates no-literal-credentials-in-env", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).env!.push({ name: "ANTHROPIC_API_KEY", value: "sk-ant-literal" });
        }),
      );
      expect(violated).toEqual(["no-literal-credentials-in-env"]);
    });

    it("a token taken from a ConfigMap violates no-literal-credentials-in-env", async () => {
      const violated = await violatedBy(
        workload((spec) => {
          agent(spec).env!.push({
            name: "GITHUB_TOKEN",
            valueFrom: { configMapKeyRef: { name: "c", key: "t" } },
          });
        }),
      );
      expect(violated).toEqual(["no-literal-credentials-in-env"]);
    });

    it.each<[string, (spec: PodSpec) => void]>([
      ["limits.memory missing", (spec) => delete agent(spec).resources!.limits!.memory],
      ["requests.cpu missing", (spec) => delete agent(spec).resources!.requests!.cpu],
      [
        "a zero cpu limit",
        (spec) => {
          agent(spec).resources!.limits!.cpu = "0";
        },
      ],
      ["no resources at all", (spec) => delete agent(spec).resources],
    ])("%s violates resource-limits-set", async (_, change) => {
      expect(await violatedBy(workload(change))).toEqual(["resource-limits-set"]);
    });
  });
});

describe("other pod-bearing kinds", () => {
  it.each([
    ["kubernetes:apps/v1:StatefulSet", (pod: object) => ({ spec: { template: { spec: pod } } })],
    ["kubernetes:apps/v1:DaemonSet", (pod: object) => ({ spec: { template: { spec: pod } } })],
    ["kubernetes:batch/v1:Job", (pod: object) => ({ spec: { template: { spec: pod } } })],
    [
      "kubernetes:batch/v1:CronJob",
      (pod: object) => ({ spec: { jobTemplate: { spec: { template: { spec: pod } } } } }),
    ],
  ])("a privileged container in a %s violates no-privileged-containers", async (type, wrap) => {
    const spec = (deployment().props as { spec: { template: { spec: PodSpec } } }).spec.template.spec;
    expect(await violatedBy({ type, name: "other", props: wrap(spec) })).toEqual([]);
    agent(spec).securityContext!.privileged = true;
    expect(await violatedBy({ type, name: "other", props: wrap(spec) })).toEqual([
      "no-privileged-containers",
    ]);
  });
});
