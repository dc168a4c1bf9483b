import { describe, expect, it } from "vitest";
import { KeyedMutex } from "./keyed-mutex.ts";

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("KeyedMutex", () => {
  it("runs a key's operations one after the other, in order, whatever the first one's outcome", async () => {
    const ops = new KeyedMutex();
    const log: string[] = [];
    const provision = ops.run("w", async () => {
      log.push("provision start");
      await tick(30);
      log.push("provision end");
      throw new Error("up failed");
    });
    const remove = ops.run("w", async () => {
      log.push("remove");
      return "removed";
    });
    await expect(provision).rejects.toThrow("up failed");
    expect(await remove).toBe("removed");
    expect(log).toEqual(["provision start", "provision end", "remove"]);
  });

  it("lets other keys' operations run meanwhile", async () => {
    const ops = new KeyedMutex();
    const log: string[] = [];
    const slow = ops.run("a", async () => {
      await tick(30);
      log.push("a");
    });
    await ops.run("b", async () => {
      log.push("b");
    });
    await slow;
    expect(log).toEqual(["b", "a"]);
  });
});
