import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { Labels, workloadName } from "../../contracts/session-spec.ts";
import type { StackManager } from "../../stacks/index.ts";
import { DockerDriver } from "./driver.ts";

const name = workloadName("team", "s1");
const labels = { [Labels.managedBy]: "agent-sessions", [Labels.namespace]: "team", [Labels.session]: "s1" };

/**
 * An engine holding a session's container, volume and network that its stack does not know of
 * (the fast path made the container; a kill -9 of the runner cut its recording short).
 */
function engineWithLeftovers() {
  const removed: string[] = [];
  const matches = (filters: string | undefined) => {
    const wanted = (JSON.parse(filters ?? "{}") as { label?: string[] }).label ?? [];
    return wanted.every((pair) => {
      const [key, value] = pair.split("=");
      return value === undefined
        ? key !== undefined && key in labels
        : labels[key as keyof typeof labels] === value;
    });
  };
  let containers = [{ Id: "c-1", Names: [`/${name}`], Labels: labels }];
  let volumes = [{ Name: `${name}-workspace`, Labels: labels }];
  let networks = [{ Id: "n-1", Name: `${name}-net`, Labels: labels }];
  const docker = {
    listVolumes: async (o?: { filters?: string }) => ({ Volumes: matches(o?.filters) ? volumes : [] }),
    listContainers: async (o?: { filters?: string }) => (matches(o?.filters) ? containers : []),
    listNetworks: async (o?: { filters?: string }) => (matches(o?.filters) ? networks : []),
    getContainer: (id: string) => ({
      inspect: async () => {
        const found = containers.find((c) => c.Id === id || c.Names.includes(`/${id}`));
        if (!found) throw Object.assign(new Error("no such container"), { statusCode: 404 });
        return { Config: { Labels: found.Labels } };
      },
      remove: async () => {
        removed.push(`container ${id}`);
        containers = containers.filter((c) => c.Id !== id && !c.Names.includes(`/${id}`));
      },
    }),
    getVolume: (id: string) => ({
      remove: async () => {
        removed.push(`volume ${id}`);
        volumes = volumes.filter((v) => v.Name !== id);
      },
    }),
    getNetwork: (id: string) => ({
      remove: async () => {
        removed.push(`network ${id}`);
        networks = networks.filter((n) => n.Id !== id);
      },
    }),
  };
  return {
    docker: docker as unknown as Docker,
    removed,
    left: () => [...containers, ...volumes, ...networks],
    dropVolumes: () => {
      volumes = [];
    },
  };
}

describe("removing a workspace after a runner restart", () => {
  it("removes its container, volume and network even when its stack does not know them", async () => {
    const engine = engineWithLeftovers();
    const destroyed: string[] = [];
    // The stack holds nothing of them: its destroy removes nothing on the engine.
    const stacks = {
      destroy: async (ns: string, n: string) => {
        destroyed.push(`${ns}/${n}`);
      },
    } as unknown as StackManager;
    const driver = new DockerDriver(engine.docker, stacks);
    await driver.remove(name);
    expect(destroyed).toEqual(["team/s1"]);
    expect(engine.left()).toEqual([]);
    expect(engine.removed).toEqual(["container c-1", `volume ${name}-workspace`, "network n-1"]);
  });
});

describe("removing a workspace whose volume is gone", () => {
  it("still removes its container (labelled as ours)", async () => {
    const engine = engineWithLeftovers();
    engine.dropVolumes();
    const driver = new DockerDriver(engine.docker, { destroy: async () => {} } as unknown as StackManager);
    await driver.remove(name);
    expect(engine.removed).toEqual([`container ${name}`]);
  });
});
