import { describe, expect, it } from "vitest";
import { importStorageRequest, summedSizes } from "./snapshots.ts";

describe("snapshot sizes on Kubernetes", () => {
  it("sums the copy pod's one-size-a-line output (files only; nothing is 0)", () => {
    expect(summedSizes("7\n6\n100000\n")).toBe(100_013);
    expect(summedSizes("")).toBe(0);
  });

  it("an import's PVC asks for the session default, or the archive's size with room past it", () => {
    expect(importStorageRequest(10 * 1024 * 1024)).toBe("1024Mi");
    expect(importStorageRequest(2 * 1024 * 1024 * 1024)).toBe(`${2560 + 64}Mi`);
  });
});
