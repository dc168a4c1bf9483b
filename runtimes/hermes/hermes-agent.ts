/**
 * How a session runs Hermes: `HERMES_HOME` on the session volume (config.yaml naming the Agent's
 * OpenAI-compatible endpoint, state.db with the conversations), one ACP session per use whose id
 * is kept beside them so a restarted workload `session/load`s the same conversation, the
 * toolsets allowlisted (runtimes/hermes/hermes_acp.py), and nothing that reaches the network on
 * its own: `context_length` is set (without it Hermes looks model metadata up online), lazy pip
 * installs, the model catalog, title generation, memory, compression and skills are off.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sessionSkillFiles, skillsPrompt } from "../kit/skills.ts";
import { AcpClient } from "./acp-client.ts";

/** Where the image installs Hermes' venv and our launcher (scripts/testbed.d/hermes-image.sh). */
export const HERMES_PYTHON_DEFAULT = "/opt/hermes/bin/python";
export const HERMES_LAUNCHER_DEFAULT = "/app/runtimes/hermes/hermes_acp.py";
/** read_file, write_file, patch, search_files; terminal, process. */
export const HERMES_TOOLSETS_DEFAULT = "file,terminal";

export type HermesAgentSettings = {
  workspace: string;
  /** `$HERMES_HOME`. @default <workspace>/.hermes */
  home: string;
  /** The Agent's endpoint and model (MODEL_BASE_URL, MODEL_NAME); none: Hermes has no model. */
  model?: { baseUrl: string; name: string };
  /** The variable holding the provider key; config.yaml names it, never its value. */
  apiKeyEnv: string;
  /** The model's context window Hermes assumes. @default 131072 */
  contextLength: number;
  toolsets: string;
  python: string;
  launcher: string;
};

export function hermesAgentSettings(source: NodeJS.ProcessEnv = process.env): HermesAgentSettings {
  const workspace = source.AGENT_WORKSPACE ?? "/workspace";
  return {
    workspace,
    home: source.HERMES_HOME ?? join(workspace, ".hermes"),
    ...(source.MODEL_BASE_URL
      ? { model: { baseUrl: source.MODEL_BASE_URL, name: source.MODEL_NAME ?? "default" } }
      : {}),
    apiKeyEnv: "MODEL_API_KEY",
    contextLength: Number(source.HERMES_CONTEXT_LENGTH ?? 131_072),
    toolsets: source.HERMES_TOOLSETS ?? HERMES_TOOLSETS_DEFAULT,
    python: source.HERMES_PYTHON ?? HERMES_PYTHON_DEFAULT,
    launcher: source.HERMES_LAUNCHER ?? HERMES_LAUNCHER_DEFAULT,
  };
}

/** config.yaml (JSON is YAML), rewritten at every start: the Agent may have changed. */
export function hermesConfig(settings: HermesAgentSettings, source: NodeJS.ProcessEnv = process.env): string {
  const config = {
    model: settings.model
      ? {
          provider: "custom",
          base_url: settings.model.baseUrl,
          // Hermes expands `${NAME}` from its environment: the file never holds the key.
          api_key: source[settings.apiKeyEnv] ? `\${${settings.apiKeyEnv}}` : "none",
          default: settings.model.name,
          context_length: settings.contextLength,
        }
      : {},
    agent: {
      // One request has one deadline (the adapter's): Hermes' own retries would spend it silently.
      api_max_retries: 0,
      environment_probe: false,
      coding_context: "off",
      verify_on_stop: false,
    },
    compression: { enabled: false },
    memory: { memory_enabled: false, user_profile_enabled: false },
    auxiliary: { title_generation: { enabled: false } },
    model_catalog: { enabled: false },
    skills: { enabled: false },
    // Hermes pip-installs optional dependencies when a feature first needs them (e.g. boto3 for
    // its Bedrock provider at start): never from a session.
    security: { allow_lazy_installs: false },
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

/** The ACP session ids kept on the volume, one per use ("harness", "agent"). */
function sessionsFile(settings: HermesAgentSettings): string {
  return join(settings.home, "agent-sessions.json");
}

function savedSessions(settings: HermesAgentSettings): Record<string, string> {
  try {
    return JSON.parse(readFileSync(sessionsFile(settings), "utf8")) as Record<string, string>;
  } catch {
    return {};
  }
}

export type HermesSession = { acp: AcpClient; sessionId: string; resumed: boolean };

/**
 * Starts `hermes acp` in the workspace and opens the ACP session of `use`: `session/load` of the
 * one kept on the volume, else `session/new` (its id then kept). Permission requests (edit and
 * command approvals) are granted: the allowlisted tools run as the session user, confined by the
 * workload (read-only root; only /workspace and /tmp writable).
 */
export async function startHermes(
  settings: HermesAgentSettings,
  use: string,
  source: NodeJS.ProcessEnv = process.env,
): Promise<HermesSession> {
  mkdirSync(settings.home, { recursive: true, mode: 0o700 });
  writeFileSync(join(settings.home, "config.yaml"), hermesConfig(settings, source));
  const env: NodeJS.ProcessEnv = {
    ...source,
    HERMES_HOME: settings.home,
    HERMES_TOOLSETS: settings.toolsets,
    HERMES_DISABLE_LAZY_INSTALLS: "1",
    HOME: settings.workspace,
    PYTHONDONTWRITEBYTECODE: "1",
    PYTHONUNBUFFERED: "1",
    // The session's skills (issue 39), appended to Hermes' system prompt by hermes_acp.py (12.).
    AGENT_SESSIONS_SKILLS_PROMPT: skillsPrompt(sessionSkillFiles()),
  };
  // The runner's token for this adapter is not the agent's business (its terminal sees its env).
  delete env.ADAPTER_TOKEN;
  const acp = new AcpClient({
    command: [settings.python, settings.launcher],
    cwd: settings.workspace,
    env,
    onRequest: (method, params) => (method === "session/request_permission" ? grant(params) : undefined),
  });
  try {
    const init = await Promise.race([
      acp.request("initialize", { protocolVersion: 1, clientCapabilities: {} }),
      acp.exited.then(() => undefined),
    ]);
    if (!init?.ok) throw new Error(init ? init.error.message : "it exited");
    const saved = savedSessions(settings)[use];
    if (saved && existsSync(join(settings.home, "state.db"))) {
      const loaded = await acp.request("session/load", {
        sessionId: saved,
        cwd: settings.workspace,
        mcpServers: [],
      });
      if (loaded.ok && loaded.result !== null) return { acp, sessionId: saved, resumed: true };
    }
    const created = await acp.request("session/new", { cwd: settings.workspace, mcpServers: [] });
    const sessionId = created.ok ? (created.result as { sessionId?: unknown } | null)?.sessionId : undefined;
    if (typeof sessionId !== "string") throw new Error(created.ok ? "no session id" : created.error.message);
    writeFileSync(
      sessionsFile(settings),
      `${JSON.stringify({ ...savedSessions(settings), [use]: sessionId })}\n`,
    );
    return { acp, sessionId, resumed: false };
  } catch (error) {
    await acp.stop(1_000);
    throw new Error(`hermes did not start: ${(error as Error).message}`);
  }
}

/** Grants a permission request with its allow option (ACP `RequestPermissionOutcome`). */
function grant(params: Record<string, unknown>): unknown {
  const options = (params.options ?? []) as { optionId?: string; kind?: string }[];
  const allow =
    options.find((o) => o.kind === "allow_once") ?? options.find((o) => o.kind === "allow_always");
  return allow?.optionId
    ? { outcome: { outcome: "selected", optionId: allow.optionId } }
    : { outcome: { outcome: "cancelled" } };
}
