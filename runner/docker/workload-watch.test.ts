import { PassThrough } from "node:stream";
import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { watchWorkloadExits } from "./workload-watch.ts";

/** An engine with an event stream the test writes and containers by name it sets. */
function fakeEngine() {
  const events = new PassThrough();
  const containers = new Map<string, { Id: string; State: { OOMKilled: boolean } }>();
  const docker = {
    getEvents: async () => events,
    getContainer: (name: string) => ({
      inspect: async () => {
        const c = containers.get(name);
        if (!c) throw Object.assign(new Error("no such container"), { statusCode: 404 });
        return c;
      },
    }),
  } as unknown as Docker;
  const send = (Action: string, name: string, id: string, exitCode?: string) =>
    events.write(
      `${JSON.stringify({ Action, id, Actor: { ID: id, Attributes: { name, ...(exitCode ? { exitCode } : {}) } } })}\n`,
    );
  return { docker, containers, send, events };
}

async function watched(engine: ReturnType<typeof fakeEngine>) {
  const exits: string[] = [];
  const stale: string[] = [];
  const unwatch = await watchWorkloadExits(
    engine.docker,
    (name, reason, detail) => exits.push(`${name} ${reason} ${detail}`),
    {
      onStale: (name, action) => stale.push(`${name} ${action}`),
      dieSettleMs: 20,
    },
  );
  return { exits, stale, unwatch };
}

const settle = () => new Promise((r) => setTimeout(r, 80));

describe("watchWorkloadExits", () => {
  it("reports a container that exited, and one removed", async () => {
    const engine = fakeEngine();
    const w = await watched(engine);
    engine.containers.set("as-a", { Id: "a1", State: { OOMKilled: false } });
    engine.send("die", "as-a", "a1", "1");
    await settle();
    engine.containers.delete("as-a");
    engine.send("destroy", "as-a", "a1");
    await settle();
    expect(w.exits).toEqual(["as-a ContainerExited exit code 1", "as-a ContainerRemoved container removed"]);
    w.unwatch();
  });

  it("a die followed by its destroy (docker rm -f) is one removal, not an exit", async () => {
    const engine = fakeEngine();
    const w = await watched(engine);
    engine.send("die", "as-a", "a1", "137");
    engine.send("destroy", "as-a", "a1");
    await settle();
    expect(w.exits).toEqual(["as-a ContainerRemoved container removed"]);
    w.unwatch();
  });

  it("tells an OOM kill from a docker kill by the oom event or the engine's OOMKilled", async () => {
    const engine = fakeEngine();
    const w = await watched(engine);
    engine.containers.set("as-a", { Id: "a1", State: { OOMKilled: true } });
    engine.send("die", "as-a", "a1", "137");
    engine.containers.set("as-b", { Id: "b1", State: { OOMKilled: false } });
    engine.send("oom", "as-b", "b1");
    engine.send("die", "as-b", "b1", "137");
    engine.containers.set("as-c", { Id: "c1", State: { OOMKilled: false } });
    engine.send("die", "as-c", "c1", "137");
    await settle();
    expect(w.exits.sort()).toEqual([
      "as-a OOMKilled exit code 137",
      "as-b OOMKilled exit code 137",
      "as-c ContainerExited exit code 137",
    ]);
    w.unwatch();
  });

  it("an event of a container the name no longer holds (a stop's removal read after the resume made the next) is not reported", async () => {
    const engine = fakeEngine();
    const w = await watched(engine);
    // The stop removed a1; the resume already runs a2 under the same name when the events are read.
    engine.containers.set("as-a", { Id: "a2", State: { OOMKilled: false } });
    engine.send("die", "as-a", "a1", "143");
    await settle();
    engine.send("destroy", "as-a", "a1");
    await settle();
    expect(w.exits).toEqual([]);
    expect(w.stale).toEqual(["as-a die", "as-a destroy"]);
    // The running one's own exit still is.
    engine.send("die", "as-a", "a2", "2");
    await settle();
    expect(w.exits).toEqual(["as-a ContainerExited exit code 2"]);
    w.unwatch();
  });

  it("the engine's stream ending is every workload lost", async () => {
    const engine = fakeEngine();
    const w = await watched(engine);
    engine.events.end();
    await settle();
    expect(w.exits).toEqual(["* EngineRestarted docker engine event stream ended"]);
    w.unwatch();
  });
});
