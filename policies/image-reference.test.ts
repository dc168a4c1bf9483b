import { describe, expect, it } from "vitest";
import { isDigestPinned, registryOf } from "./image-reference.ts";

const DIGEST = `sha256:${"0a".repeat(32)}`;

describe("image references", () => {
  it.each([
    [`127.0.0.1:5000/reference@${DIGEST}`, true],
    [`127.0.0.1:5000/reference:v1@${DIGEST}`, true],
    ["127.0.0.1:5000/reference:v1", false],
    [`reference@sha256:${"0A".repeat(32)}`, false],
    [`reference@sha512:${"0a".repeat(64)}`, false],
    [`@${DIGEST}`, false],
  ])("%s is pinned by digest: %s", (image, pinned) => {
    expect(isDigestPinned(image)).toBe(pinned);
  });

  it.each([
    [`127.0.0.1:5000/agent-sessions/reference@${DIGEST}`, "127.0.0.1:5000"],
    ["localhost/reference:v1", "localhost"],
    ["Registry.Example.com/team/app:v1", "registry.example.com"],
    ["busybox", "docker.io"],
    ["busybox:1.36", "docker.io"],
    ["library/busybox:1.36", "docker.io"],
    [`ghcr.io/org/app@${DIGEST}`, "ghcr.io"],
  ])("%s is pulled from %s", (image, registry) => {
    expect(registryOf(image)).toBe(registry);
  });
});
