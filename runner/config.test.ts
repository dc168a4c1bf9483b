import { hostname } from "node:os";
import { describe, expect, it } from "vitest";
import { insecureServerUrl, parseLabelPairs, parseRunnerConfig } from "./config.ts";

/** The issues a bad environment gets, as `VARIABLE: message`. */
function issuesOf(env: Record<string, string>): string[] {
  try {
    parseRunnerConfig(env);
  } catch (error) {
    return (error as { issues: { path: PropertyKey[]; message: string }[] }).issues.map(
      (i) => `${i.path.map(String).join(".")}: ${i.message}`,
    );
  }
  throw new Error("parsed");
}

const base = {
  AGENT_SESSIONS_SERVER_URL: "http://127.0.0.1:8787",
  AGENT_SESSIONS_RUNNER_TOKEN: "runner-token-0123456789",
  AGENT_SESSIONS_RUNNER_DATA_DIR: "/tmp/x",
};

describe("runner config: capacity and labels", () => {
  it("reads labels and capacity from the environment, a fallback filling what is unset or empty", () => {
    const config = parseRunnerConfig({
      ...base,
      AGENT_SESSIONS_RUNNER_LABELS: "zone=a, gpu=true,example.com/tier=gold",
      AGENT_SESSIONS_RUNNER_CAPACITY: "3",
      AGENT_SESSIONS_RUNNER_NAME: "runner-1",
    });
    expect(config).toMatchObject({
      name: "runner-1",
      capacity: 3,
      labels: { zone: "a", gpu: "true", "example.com/tier": "gold" },
    });
    const fallback = parseRunnerConfig(
      { ...base, AGENT_SESSIONS_RUNNER_LABELS: "zone=a", AGENT_SESSIONS_RUNNER_CAPACITY: "" },
      { AGENT_SESSIONS_RUNNER_LABELS: "zone=b", AGENT_SESSIONS_RUNNER_CAPACITY: "7" },
    );
    expect(fallback).toMatchObject({ capacity: 7, labels: { zone: "a" } });
    expect(parseRunnerConfig(base)).toMatchObject({ capacity: 100, labels: {} });
  });

  it("parses key=value pairs, repeated or comma-separated; an empty value is a value", () => {
    expect(parseLabelPairs(["zone=a", "disk=ssd,gpu="])).toEqual({ zone: "a", disk: "ssd", gpu: "" });
    expect(() => parseLabelPairs(["zone"])).toThrow('a label must be key=value, got "zone"');
    expect(() => parseLabelPairs(["=a"])).toThrow("key=value");
    expect(() => parseLabelPairs(["zone=a", "zone=b"])).toThrow("label zone is given twice");
  });

  it("refuses labels, names and capacities placement could not use", () => {
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_LABELS: "bad key=x" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_LABELS: "zone=has space" })).toThrow();
    expect(() =>
      parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_LABELS: `k=${"v".repeat(64)}` }),
    ).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_NAME: "a/b" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_CAPACITY: "0" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_CAPACITY: "two" })).toThrow();
  });

  it("names the variable of a malformed label pair", () => {
    expect(issuesOf({ ...base, AGENT_SESSIONS_RUNNER_LABELS: "zone" })).toEqual([
      'AGENT_SESSIONS_RUNNER_LABELS: a label must be key=value, got "zone"',
    ]);
  });
});

describe("runner config: the rest of the environment", () => {
  it("defaults: docker on its socket, fast paths on, the embedded runner on a worker thread, the host name", () => {
    expect(parseRunnerConfig(base)).toMatchObject({
      engine: "docker",
      dockerHost: "unix:///var/run/docker.sock",
      kubeconfig: undefined,
      gitImage: undefined,
      fastPath: true,
      fastCreate: true,
      embeddedLink: "worker",
      allowInsecure: false,
      name: hostname(),
      kubernetes: { namespace: "agent-sessions" },
    });
  });

  it("turns a fast path off only with `off`; the embedded link is one of its choices, worker unless set", () => {
    const off = parseRunnerConfig({
      ...base,
      AGENT_SESSIONS_FAST_PATH: "off",
      AGENT_SESSIONS_FAST_CREATE: "off",
      AGENT_SESSIONS_EMBEDDED_LINK: "websocket",
    });
    expect(off).toMatchObject({ fastPath: false, fastCreate: false, embeddedLink: "websocket" });
    const other = parseRunnerConfig({
      ...base,
      AGENT_SESSIONS_FAST_PATH: "no",
      AGENT_SESSIONS_FAST_CREATE: "false",
    });
    expect(other).toMatchObject({ fastPath: true, fastCreate: true, embeddedLink: "worker" });
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_EMBEDDED_LINK: "ws" })).toThrow(
      /AGENT_SESSIONS_EMBEDDED_LINK[\s\S]*must be worker, in-process or websocket/,
    );
    for (const [value, link] of [
      ["in-process", "in-process"],
      ["channel", "in-process"],
      ["worker", "worker"],
    ])
      expect(parseRunnerConfig({ ...base, AGENT_SESSIONS_EMBEDDED_LINK: value })).toMatchObject({
        embeddedLink: link,
      });
  });

  it("reads the engine, its address, the kubeconfig and the git image", () => {
    const image = `127.0.0.1:5000/base@sha256:${"a".repeat(64)}`;
    expect(
      parseRunnerConfig({
        ...base,
        AGENT_SESSIONS_ENGINE: "kubernetes",
        DOCKER_HOST: "unix:///run/other.sock",
        KUBECONFIG: "/etc/kube/config",
        AGENT_SESSIONS_GIT_IMAGE: image,
      }),
    ).toMatchObject({
      engine: "kubernetes",
      dockerHost: "unix:///run/other.sock",
      kubeconfig: "/etc/kube/config",
      gitImage: image,
    });
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_ENGINE: "podman" })).toThrow(
      /AGENT_SESSIONS_ENGINE/,
    );
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_GIT_IMAGE: "alpine/git:latest" })).toThrow(
      /AGENT_SESSIONS_GIT_IMAGE/,
    );
  });

  it("requires the server URL, the token and the data directory, naming each", () => {
    expect(issuesOf({})).toEqual([
      "AGENT_SESSIONS_SERVER_URL: required: the server to dial (runner --server URL)",
      "AGENT_SESSIONS_RUNNER_TOKEN: required: the runner token",
      "AGENT_SESSIONS_RUNNER_DATA_DIR: required: the runner's data directory",
    ]);
    expect(issuesOf({ ...base, AGENT_SESSIONS_RUNNER_TOKEN: "short" })[0]).toMatch(
      /^AGENT_SESSIONS_RUNNER_TOKEN: /,
    );
  });
});

describe("runner config: the server URL", () => {
  it("takes plain ws:// or http:// only to loopback; TLS anywhere", () => {
    for (const url of ["http://127.0.0.1:8787", "ws://127.3.4.5", "http://localhost:1", "http://[::1]:8787"])
      expect(insecureServerUrl(url), url).toBeUndefined();
    for (const url of ["https://server.example", "wss://10.0.0.5:443"])
      expect(insecureServerUrl(url), url).toBeUndefined();
    for (const url of ["http://10.0.0.5:8787", "ws://server.example", "http://127.0.0.1.example.com"])
      expect(insecureServerUrl(url), url).toMatch(/not TLS/);
    expect(insecureServerUrl("ftp://127.0.0.1")).toMatch(/http/);
  });

  it("refuses plain ws:// off loopback unless AGENT_SESSIONS_RUNNER_ALLOW_INSECURE=true", () => {
    const remote = { ...base, AGENT_SESSIONS_SERVER_URL: "http://10.213.0.1:8787" };
    expect(() => parseRunnerConfig(remote)).toThrow(/not TLS: use https:\/\/ or wss:\/\//);
    expect(parseRunnerConfig({ ...remote, AGENT_SESSIONS_RUNNER_ALLOW_INSECURE: "true" })).toMatchObject({
      serverUrl: "http://10.213.0.1:8787",
      allowInsecure: true,
    });
    expect(
      parseRunnerConfig({ ...base, AGENT_SESSIONS_SERVER_URL: "wss://runner.example" }).allowInsecure,
    ).toBe(false);
  });
});

describe("runner config: agent output bounds", () => {
  it("defaults to the documented bounds and reads them from the environment", () => {
    expect(parseRunnerConfig(base).agentOutput).toEqual({
      maxLineBytes: 256 * 1024,
      bytesPerSecond: 4 * 1024 * 1024,
      framesPerSecond: 2000,
    });
    expect(
      parseRunnerConfig({
        ...base,
        AGENT_SESSIONS_AGENT_LINE_MAX_BYTES: "4096",
        AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND: "1000000",
        AGENT_SESSIONS_AGENT_FRAMES_PER_SECOND: "50",
      }).agentOutput,
    ).toEqual({ maxLineBytes: 4096, bytesPerSecond: 1_000_000, framesPerSecond: 50 });
  });

  it("refuses a rate that is not a positive integer", () => {
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_AGENT_FRAMES_PER_SECOND: "0" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND: "x" })).toThrow();
  });
});

describe("runner config: the startup CPU boost", () => {
  it("is 2 cores for at most 10 s unless set; 0 or off turns it off", () => {
    expect(parseRunnerConfig(base).startupBoost).toEqual({ cores: 2, maxMs: 10_000 });
    expect(
      parseRunnerConfig({
        ...base,
        AGENT_SESSIONS_STARTUP_CPU_BOOST: "1.5",
        AGENT_SESSIONS_STARTUP_CPU_BOOST_MS: "4000",
      }).startupBoost,
    ).toEqual({ cores: 1.5, maxMs: 4000 });
    expect(parseRunnerConfig({ ...base, AGENT_SESSIONS_STARTUP_CPU_BOOST: "off" }).startupBoost.cores).toBe(
      0,
    );
    expect(parseRunnerConfig({ ...base, AGENT_SESSIONS_STARTUP_CPU_BOOST: "0" }).startupBoost.cores).toBe(0);
  });

  it("refuses what is not a number of cores or a bound, naming the variable", () => {
    expect(issuesOf({ ...base, AGENT_SESSIONS_STARTUP_CPU_BOOST: "lots" })).toEqual([
      'AGENT_SESSIONS_STARTUP_CPU_BOOST: must be a number of cores (e.g. 2 or 1.5), 0 or off, got "lots"',
    ]);
    expect(issuesOf({ ...base, AGENT_SESSIONS_STARTUP_CPU_BOOST: "-1" })[0]).toMatch(
      /^AGENT_SESSIONS_STARTUP_CPU_BOOST: /,
    );
    expect(issuesOf({ ...base, AGENT_SESSIONS_STARTUP_CPU_BOOST_MS: "-5" })[0]).toMatch(
      /^AGENT_SESSIONS_STARTUP_CPU_BOOST_MS: /,
    );
  });
});
