import { describe, expect, it } from "vitest";
import { embeddedRunnerConfig } from "./serve.ts";

const server = { token: "t".repeat(32), dataDir: "/tmp/serve-test", engine: "docker" as const };

describe("serve's embedded runner", () => {
  it.each([
    ["every IPv4 interface", "http://0.0.0.0:8787", "http://127.0.0.1:8787"],
    ["every IPv6 interface", "http://[::]:8787", "http://[::1]:8787"],
    ["loopback", "http://127.0.0.1:8787", "http://127.0.0.1:8787"],
  ])("reaches its own server listening on %s, with no insecure switch", async (_, listening, dialed) => {
    const config = await embeddedRunnerConfig({}, { ...server, serverUrl: listening });
    expect(config.serverUrl).toBe(dialed);
    expect(config.allowInsecure).toBe(false);
  });

  it("reaches its own server listening on one address of this machine (the address it bound)", async () => {
    const config = await embeddedRunnerConfig({}, { ...server, serverUrl: "http://10.1.2.3:8787" });
    expect(config.serverUrl).toBe("http://10.1.2.3:8787");
  });

  it("keeps a standalone runner's refusal of plain ws:// to another host", async () => {
    const { parseRunnerConfig } = await import("../../runner/config.ts");
    expect(() => parseRunnerConfig({}, { ...server, serverUrl: "http://0.0.0.0:8787" })).toThrow(
      /not on this machine and not TLS/,
    );
  });
});
