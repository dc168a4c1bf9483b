import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { parseConfig } from "./config.ts";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "agent-sessions-config-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("server configuration", () => {
  it("uses PostgreSQL only when AGENT_SESSIONS_DATABASE_URL is set, and refuses a bad one without echoing its password", () => {
    expect(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir }).databaseUrl).toBeUndefined();
    const url = "postgres://app:s3cret-pw@127.0.0.1:5433/agent_sessions";
    expect(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_DATABASE_URL: url }).databaseUrl).toBe(
      url,
    );
    for (const bad of [
      "mysql://app:s3cret-pw@db/x",
      "app:s3cret-pw@127.0.0.1/x",
      "postgres://app:s3cret-pw@",
    ]) {
      const attempt = () => parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_DATABASE_URL: bad });
      expect(attempt).toThrow(/AGENT_SESSIONS_DATABASE_URL: must/);
      expect(attempt).not.toThrow(/s3cret-pw/);
    }
  });

  it("has defaults, and generates both tokens into the data dir with mode 0600, keeping them across starts", () => {
    const config = parseConfig({ AGENT_SESSIONS_DATA_DIR: dir });
    expect(config).toMatchObject({
      port: 8787,
      host: "127.0.0.1",
      dataDir: dir,
      heartbeatMs: 5_000,
      reattachWindowMs: 60_000,
      frameBufferSize: 1_000,
      commandTimeoutMs: 300_000,
      referenceImage: undefined,
    });
    expect(readFileSync(join(dir, "admin-token"), "utf8").trim()).toBe(config.adminToken);
    expect(statSync(join(dir, "admin-token")).mode & 0o777).toBe(0o600);
    // Never a leading "-", which a command line would take for an option.
    expect(config.adminToken).toMatch(/^[0-9a-f]{64}$/);
    expect(statSync(join(dir, "runner-token")).mode & 0o777).toBe(0o600);
    expect(config.runnerToken).not.toBe(config.adminToken);
    expect(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir })).toEqual(config);
  });

  it("takes tokens and numbers from the environment", () => {
    const config = parseConfig({
      AGENT_SESSIONS_DATA_DIR: dir,
      AGENT_SESSIONS_TOKEN: "admin-0123456789abcdef",
      AGENT_SESSIONS_RUNNER_TOKEN: "runner-0123456789abcdef",
      AGENT_SESSIONS_PORT: "0",
      AGENT_SESSIONS_REATTACH_WINDOW_MS: "250",
    });
    expect(config).toMatchObject({ adminToken: "admin-0123456789abcdef", port: 0, reattachWindowMs: 250 });
  });

  it("says where the admin token lives: its file, or nowhere when the environment gave it", () => {
    expect(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir }).adminTokenFile).toBe(join(dir, "admin-token"));
    expect(
      parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_TOKEN: "admin-0123456789abcdef" })
        .adminTokenFile,
    ).toBeUndefined();
  });

  it("takes a fallback (serve: the test bed's images) only where the environment is unset or empty", () => {
    const image = (name: string) => `127.0.0.1:5000/${name}@sha256:${"b".repeat(64)}`;
    const fallback = {
      AGENT_SESSIONS_REFERENCE_IMAGE: image("reference"),
      AGENT_SESSIONS_PI_IMAGE: image("pi"),
      AGENT_SESSIONS_HERMES_IMAGE: undefined,
    };
    const config = parseConfig(
      {
        AGENT_SESSIONS_DATA_DIR: dir,
        AGENT_SESSIONS_REFERENCE_IMAGE: "",
        AGENT_SESSIONS_PI_IMAGE: image("mine"),
      },
      fallback,
    );
    expect(config).toMatchObject({
      referenceImage: image("reference"),
      piImage: image("mine"),
      hermesImage: undefined,
    });
    expect(() =>
      parseConfig({ AGENT_SESSIONS_DATA_DIR: dir }, { AGENT_SESSIONS_COMPASS_IMAGE: "compass:latest" }),
    ).toThrow(/AGENT_SESSIONS_COMPASS_IMAGE/);
  });

  it("refuses bad values, naming them, and one token for both roles", () => {
    expect(() => parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_PORT: "99999" })).toThrow(
      /AGENT_SESSIONS_PORT/,
    );
    expect(() =>
      parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_REFERENCE_IMAGE: "reference:latest" }),
    ).toThrow(/AGENT_SESSIONS_REFERENCE_IMAGE/);
    expect(() =>
      parseConfig({
        AGENT_SESSIONS_DATA_DIR: dir,
        AGENT_SESSIONS_TOKEN: "same-0123456789abcdef",
        AGENT_SESSIONS_RUNNER_TOKEN: "same-0123456789abcdef",
      }),
    ).toThrow(/must differ/);
  });

  it("offers sessions no server variable by default, and exactly the listed ones when set; never its own settings", () => {
    expect(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir }).credentialEnv).toEqual([]);
    expect(
      parseConfig({
        AGENT_SESSIONS_DATA_DIR: dir,
        AGENT_SESSIONS_CREDENTIAL_ENV: "OPENAI_API_KEY,PROVIDER_*",
      }).credentialEnv,
    ).toEqual(["OPENAI_API_KEY", "PROVIDER_*"]);
    expect(() =>
      parseConfig({
        AGENT_SESSIONS_DATA_DIR: dir,
        AGENT_SESSIONS_CREDENTIAL_ENV: "OPENAI_API_KEY,AGENT_SESSIONS_TOKEN",
      }),
    ).toThrow(/AGENT_SESSIONS_CREDENTIAL_ENV.*never offered/);
  });
});
