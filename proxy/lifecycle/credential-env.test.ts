import { describe, expect, it } from "vitest";
import { CredentialEnvAllowlist, offeredCredentialEnv, offersCredentialEnv } from "./credential-env.ts";

describe("the credential environment offered to sessions (AGENT_SESSIONS_CREDENTIAL_ENV)", () => {
  it("parses names and prefixes, comma-separated, ignoring blanks", () => {
    expect(CredentialEnvAllowlist.parse(" OPENAI_API_KEY, PROVIDER_*,,")).toEqual([
      "OPENAI_API_KEY",
      "PROVIDER_*",
    ]);
    expect(CredentialEnvAllowlist.parse("")).toEqual([]);
  });

  it("refuses entries that are not names, and any that would cover the server's own AGENT_SESSIONS_* settings", () => {
    for (const bad of [
      "*",
      "lower",
      "A-B",
      "KEY*X",
      "AGENT_SESSIONS_TOKEN",
      "AGENT_SESSIONS_*",
      "AGENT_*",
      "A*",
    ])
      expect(CredentialEnvAllowlist.safeParse(bad).success, bad).toBe(false);
    // A name that merely starts like the prefix, without a wildcard, covers nothing of it.
    expect(CredentialEnvAllowlist.parse("AGENT")).toEqual(["AGENT"]);
  });

  it("offers exactly the listed names and the variables under a listed prefix", () => {
    const allow = ["OPENAI_API_KEY", "PROVIDER_*"];
    expect(offersCredentialEnv(allow, "OPENAI_API_KEY")).toBe(true);
    expect(offersCredentialEnv(allow, "PROVIDER_A_KEY")).toBe(true);
    expect(offersCredentialEnv(allow, "OPENAI_API_KEY_2")).toBe(false);
    expect(offersCredentialEnv(allow, "HOME")).toBe(false);
    expect(offersCredentialEnv([], "OPENAI_API_KEY")).toBe(false);
  });

  it("builds the offered environment from the server's: listed variables only, unset listed names present as unset", () => {
    const env = {
      OPENAI_API_KEY: "sk-1",
      PROVIDER_A_KEY: "pa",
      AGENT_SESSIONS_TOKEN: "admin",
      AGENT_SESSIONS_RUNNER_TOKEN: "runner",
      PULUMI_CONFIG_PASSPHRASE: "pp",
      HOME: "/root",
    };
    const offered = offeredCredentialEnv(["OPENAI_API_KEY", "PROVIDER_*", "ANTHROPIC_API_KEY"], env);
    expect(offered).toEqual({ OPENAI_API_KEY: "sk-1", PROVIDER_A_KEY: "pa", ANTHROPIC_API_KEY: undefined });
    expect(Object.hasOwn(offered, "ANTHROPIC_API_KEY")).toBe(true);
    expect(Object.isFrozen(offered)).toBe(true);
    expect(offeredCredentialEnv([], env)).toEqual({});
  });

  it("offers `<namespace>/<name or prefix>` entries to that namespace's Agents only", () => {
    expect(CredentialEnvAllowlist.parse("team-a/TEAM_A_*, team-b/B_KEY, SHARED")).toEqual([
      "team-a/TEAM_A_*",
      "team-b/B_KEY",
      "SHARED",
    ]);
    for (const bad of [
      "Team/KEY",
      "team-a/",
      "/KEY",
      "team-a/AGENT_SESSIONS_TOKEN",
      "a/b/KEY",
      "team-a/lower",
    ])
      expect(CredentialEnvAllowlist.safeParse(bad).success, bad).toBe(false);
    const allow = ["team-a/TEAM_A_*", "team-b/B_KEY", "SHARED"];
    expect(offersCredentialEnv(allow, "TEAM_A_KEY", "team-a")).toBe(true);
    expect(offersCredentialEnv(allow, "TEAM_A_KEY", "team-b")).toBe(false);
    expect(offersCredentialEnv(allow, "TEAM_A_KEY")).toBe(false);
    expect(offersCredentialEnv(allow, "SHARED", "team-b")).toBe(true);
    const offered = offeredCredentialEnv(allow, { TEAM_A_KEY: "a-secret", B_KEY: "b-secret", SHARED: "s" });
    expect(offered).toEqual({ "team-a/TEAM_A_KEY": "a-secret", "team-b/B_KEY": "b-secret", SHARED: "s" });
  });
});
