/**
 * How a session runs the Pi coding agent: its agent dir on the session volume (models.json
 * naming the Agent's OpenAI-compatible endpoint, settings.json), its sessions there too, one
 * fixed session id per use so a restarted workload resumes the same conversation, the tools
 * allowlisted, and nothing that reaches the network on its own (PI_OFFLINE, no telemetry).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sessionSkillFiles } from "../kit/skills.ts";
import { PiRpcClient } from "./rpc-client.ts";

/** Where the image installs pi (scripts/testbed.d/pi-image.sh). */
export const PI_CLI_DEFAULT = "/opt/pi/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js";
/** The provider id models.json declares for the Agent's endpoint. */
export const PI_PROVIDER = "session";
export const PI_TOOLS_DEFAULT = "read,bash,edit,write";

export type PiAgentSettings = {
  workspace: string;
  /** `$PI_CODING_AGENT_DIR`. @default <workspace>/.pi/agent */
  agentDir: string;
  /** The Agent's endpoint and model (MODEL_BASE_URL, MODEL_NAME); none: pi has no model. */
  model?: { baseUrl: string; name: string };
  /** The variable holding the provider key; models.json names it, never its value. */
  apiKeyEnv: string;
  tools: string;
  cli: string;
};

export function piAgentSettings(source: NodeJS.ProcessEnv = process.env): PiAgentSettings {
  const workspace = source.AGENT_WORKSPACE ?? "/workspace";
  return {
    workspace,
    agentDir: source.PI_CODING_AGENT_DIR ?? join(workspace, ".pi", "agent"),
    ...(source.MODEL_BASE_URL
      ? { model: { baseUrl: source.MODEL_BASE_URL, name: source.MODEL_NAME ?? "default" } }
      : {}),
    apiKeyEnv: "MODEL_API_KEY",
    tools: source.PI_TOOLS ?? PI_TOOLS_DEFAULT,
    cli: source.PI_CLI ?? PI_CLI_DEFAULT,
  };
}

/** models.json and settings.json in the agent dir, rewritten at every start (the Agent may have changed). */
export function writePiConfig(settings: PiAgentSettings, source: NodeJS.ProcessEnv = process.env): void {
  mkdirSync(join(settings.agentDir, "sessions"), { recursive: true, mode: 0o700 });
  const providers = settings.model
    ? {
        [PI_PROVIDER]: {
          baseUrl: settings.model.baseUrl,
          api: "openai-completions",
          // pi reads `$NAME` from its environment at request time: the file never holds the key.
          apiKey: source[settings.apiKeyEnv] ? `$${settings.apiKeyEnv}` : "none",
          models: [{ id: settings.model.name }],
        },
      }
    : {};
  writeFileSync(join(settings.agentDir, "models.json"), `${JSON.stringify({ providers }, null, 2)}\n`);
  // One request has one deadline (the adapter's): pi's own backoff (2 s, 4 s, 8 s) would spend it
  // silently, so a failed model call fails the request and the client decides.
  writeFileSync(
    join(settings.agentDir, "settings.json"),
    `${JSON.stringify({ retry: { enabled: false }, enableInstallTelemetry: false, quietStartup: true }, null, 2)}\n`,
  );
}

/**
 * Starts `pi --mode rpc` in the workspace on the session `sessionId` (created on first use,
 * resumed after) and resolves once it answers `get_state`.
 */
export async function startPi(
  settings: PiAgentSettings,
  sessionId: string,
  source: NodeJS.ProcessEnv = process.env,
): Promise<PiRpcClient> {
  writePiConfig(settings, source);
  const env: NodeJS.ProcessEnv = {
    ...source,
    PI_CODING_AGENT_DIR: settings.agentDir,
    PI_OFFLINE: "1",
    PI_SKIP_VERSION_CHECK: "1",
    PI_TELEMETRY: "0",
  };
  // The runner's token for this adapter is not the agent's business (its bash tool sees its env).
  delete env.ADAPTER_TOKEN;
  const pi = new PiRpcClient({
    command: [
      process.execPath,
      settings.cli,
      "--mode",
      "rpc",
      ...(settings.model ? ["--provider", PI_PROVIDER, "--model", settings.model.name] : []),
      "--session-dir",
      join(settings.agentDir, "sessions"),
      "--session-id",
      sessionId,
      "--tools",
      settings.tools,
      // Only what the image ships and the session's own skills: no discovered extensions, skills,
      // templates, themes or context files, and no project-local settings the agent itself could
      // have written.
      "--no-extensions",
      "--no-skills",
      // The session's skills, read-only at /skills (issue 39): pi lists each by name,
      // description and path in its system prompt and reads one when a task calls for it.
      ...sessionSkillFiles().flatMap((skill) => ["--skill", skill.path]),
      "--no-prompt-templates",
      "--no-themes",
      "--no-context-files",
      "--no-approve",
      "--offline",
    ],
    cwd: settings.workspace,
    env,
  });
  const state = await Promise.race([pi.command("get_state"), pi.exited.then(() => undefined)]);
  if (!state?.success) {
    await pi.stop(1_000);
    throw new Error(`pi did not start: ${state?.error ?? "it exited"}`);
  }
  return pi;
}
