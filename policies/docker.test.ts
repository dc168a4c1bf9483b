import { describe, expect, it } from "vitest";
import type { ContainerInputs } from "../infra/docker/provider/schema.ts";
import { dockerContainer, dockerNetwork } from "./testing/docker-fixtures.ts";
import { resourceViolations, violatedBy } from "./testing/policy-harness.ts";

const violatedByContainer = (change: (container: ContainerInputs) => void) =>
  violatedBy(dockerContainer(change));

describe("a Docker container", () => {
  it("a tagged image violates image-pinned-by-digest", async () => {
    const violated = await violatedByContainer((c) => {
      c.image = "127.0.0.1:5000/agent-sessions/reference:latest";
    });
    expect(violated).toEqual(["image-pinned-by-digest"]);
  });

  it("an image from Docker Hub violates image-from-approved-registry", async () => {
    const violated = await violatedByContainer((c) => {
      c.image = `busybox@sha256:${"ab".repeat(32)}`;
    });
    expect(violated).toEqual(["image-from-approved-registry"]);
  });

  it.each(["networkMode", "pidMode", "ipcMode"] as const)(
    "%s host violates no-host-namespaces",
    async (field) => {
      const violations = await resourceViolations(
        dockerContainer((c) => {
          c[field] = "host";
        }),
      );
      expect(violations).toEqual([
        { policy: "no-host-namespaces", message: `the container sets ${field}: host` },
      ]);
    },
  );

  it("a privileged container violates no-privileged-containers", async () => {
    const violated = await violatedByContainer((c) => {
      c.privileged = true;
    });
    expect(violated).toEqual(["no-privileged-containers"]);
  });

  it.each([
    ["no securityOpt", []],
    ["no-new-privileges:false", ["no-new-privileges:false"]],
    ["no-new-privileges turned off after being set", ["no-new-privileges", "no-new-privileges=false"]],
  ])("%s violates no-privilege-escalation", async (_, securityOpt) => {
    const violated = await violatedByContainer((c) => {
      c.securityOpt = securityOpt;
    });
    expect(violated).toEqual(["no-privilege-escalation"]);
  });

  it.each([["no-new-privileges"], ["no-new-privileges=true"]])(
    "securityOpt %s satisfies no-privilege-escalation",
    async (opt) => {
      expect(
        await violatedByContainer((c) => {
          c.securityOpt = [opt];
        }),
      ).toEqual([]);
    },
  );

  it("not dropping ALL capabilities violates capabilities-dropped", async () => {
    const violated = await violatedByContainer((c) => {
      c.capDrop = ["NET_RAW", "SYS_ADMIN"];
    });
    expect(violated).toEqual(["capabilities-dropped"]);
  });

  it("adding a capability violates capabilities-dropped", async () => {
    const violated = await violatedByContainer((c) => {
      c.capAdd = ["NET_ADMIN"];
    });
    expect(violated).toEqual(["capabilities-dropped"]);
  });

  it.each(["", "root", "0", "0:0", "root:root", "agent"])(
    'user "%s" violates run-as-non-root',
    async (user) => {
      const violated = await violatedByContainer((c) => {
        c.user = user;
      });
      expect(violated).toEqual(["run-as-non-root"]);
    },
  );

  it("a writable root filesystem violates read-only-root-filesystem", async () => {
    const violated = await violatedByContainer((c) => {
      c.readOnlyRootfs = false;
    });
    expect(violated).toEqual(["read-only-root-filesystem"]);
  });

  it.each(["seccomp=unconfined", "seccomp:unconfined", 'seccomp={"defaultAction":"SCMP_ACT_ALLOW"}'])(
    "securityOpt %s violates seccomp-runtime-default",
    async (opt) => {
      const violated = await violatedByContainer((c) => {
        c.securityOpt.push(opt);
      });
      expect(violated).toEqual(["seccomp-runtime-default"]);
    },
  );

  it("a bind mount violates narrowed-mounts", async () => {
    const violated = await violatedByContainer((c) => {
      c.mounts.push({ type: "bind", source: "/etc", target: "/host-etc", readOnly: true });
    });
    expect(violated).toEqual(["narrowed-mounts"]);
  });

  it.each([
    [
      "the docker socket bound in",
      { type: "bind", source: "/var/run/docker.sock", target: "/var/run/docker.sock" },
    ],
    ["a mount at /run/docker.sock", { type: "volume", source: "sock", target: "/run/docker.sock" }],
    ["a socket path spelled oddly", { type: "tmpfs", target: "//var/run/../run//docker.sock/" }],
  ] as const)("%s violates narrowed-mounts", async (_, mount) => {
    const violations = await resourceViolations(
      dockerContainer((c) => {
        c.mounts.push({ ...mount });
      }),
    );
    expect(violations.map((v) => v.policy)).toContain("narrowed-mounts");
    expect(violations.some((v) => v.message.includes("engine socket"))).toBe(true);
  });

  describe("the skills mount (issue 39)", () => {
    const skills = {
      type: "volume",
      source: "agent-sessions-demo-skills",
      target: "/skills",
      readOnly: true,
    } as const;

    it("the container's own skills volume, read-only at /skills, violates nothing", async () => {
      expect(await violatedByContainer((c) => c.mounts.push({ ...skills }))).toEqual([]);
    });

    it.each([
      ["mounted writable", { ...skills, readOnly: false }],
      ["mounted elsewhere", { ...skills, target: "/workspace/skills" }],
      ["another session's skills volume", { ...skills, source: "agent-sessions-other-skills" }],
      ["the workspace at /skills", { ...skills, source: "agent-sessions-demo-workspace" }],
      ["a tmpfs at /skills", { type: "tmpfs", target: "/skills" }],
      ["a bind under /skills", { type: "bind", source: "/etc", target: "/skills/etc", readOnly: true }],
    ] as const)("the skills mount %s violates narrowed-mounts", async (_, mount) => {
      const violations = await resourceViolations(dockerContainer((c) => c.mounts.push({ ...mount })));
      expect(violations.map((v) => v.policy)).toContain("narrowed-mounts");
    });
  });

  it("a credential in env violates no-literal-credentials-in-env", async () => {
    const violated = await violatedByContainer((c) => {
      c.env.GITHUB_TOKEN = "ghp_literal";
    });
    expect(violated).toEqual(["no-literal-credentials-in-env"]);
  });

  it.each(["memoryBytes", "nanoCpus", "pidsLimit"] as const)(
    "%s 0 violates resource-limits-set",
    async (field) => {
      const violated = await violatedByContainer((c) => {
        c[field] = 0;
      });
      expect(violated).toEqual(["resource-limits-set"]);
    },
  );
});

describe("a Docker network", () => {
  it.each(["internal", "isolateFromHost"] as const)(
    "%s false violates docker-internal-network",
    async (field) => {
      const violated = await violatedBy(
        dockerNetwork((n) => {
          n[field] = false;
        }),
      );
      expect(violated).toEqual(["docker-internal-network"]);
    },
  );

  it("allowedEgress to the agent-sessions server port violates egress-excludes-control-plane-ports", async () => {
    const violations = await resourceViolations(
      dockerNetwork((n) => {
        n.allowedEgress.push({ address: "10.213.0.1", port: 8787 });
      }),
    );
    expect(violations).toEqual([
      {
        policy: "egress-excludes-control-plane-ports",
        message: "allowedEgress opens control-plane port 10.213.0.1:8787",
      },
    ]);
  });
});
