import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { ParseArgsOptionsConfig } from "node:util";
import { AgentSessionsClient } from "../client/client.ts";
import { ClientError } from "../client/client-error.ts";
import type { ErrorCode } from "../contracts/errors.ts";

/**
 * Exit codes scripts can rely on (docs/cli.md), one per kind of failure:
 * 0 ok; 1 a server-side (or unexpected) failure; 2 a usage error (bad flags or arguments,
 * unreadable or malformed input files); 3 not found; 4 a precondition or conflict (not Ready,
 * exists already, being written concurrently); 5 permission denied or unauthenticated (no token,
 * a wrong one, or one without the scope); 6 invalid (the server refused the input:
 * INVALID_ARGUMENT); 7 unavailable (the server cannot be reached, or it or its runner cannot do
 * this now: UNAVAILABLE, DEADLINE_EXCEEDED).
 */
export const ExitCode = {
  ok: 0,
  failure: 1,
  usage: 2,
  notFound: 3,
  conflict: 4,
  denied: 5,
  invalid: 6,
  unavailable: 7,
} as const;

/** The exit codes as `help` prints them. */
export const EXIT_CODES_HELP =
  "exit codes: 0 ok, 1 server-side failure, 2 usage error, 3 not found, 4 precondition or conflict,\n  5 permission denied or unauthenticated, 6 invalid input (refused by the server), 7 unavailable";

export function exitCodeOf(code: ErrorCode): number {
  switch (code) {
    case "NOT_FOUND":
      return ExitCode.notFound;
    case "FAILED_PRECONDITION":
    case "ALREADY_EXISTS":
    case "ABORTED":
      return ExitCode.conflict;
    case "PERMISSION_DENIED":
    case "UNAUTHENTICATED":
      return ExitCode.denied;
    case "INVALID_ARGUMENT":
      return ExitCode.invalid;
    case "UNAVAILABLE":
    case "DEADLINE_EXCEEDED":
      return ExitCode.unavailable;
    default:
      return ExitCode.failure;
  }
}

/**
 * `AGENT_SESSIONS_WATCH_RESYNC_MS`: how often `get hs -w` lists again beside the event stream
 * (bin/watch.ts `WATCH_RESYNC_MS`); undefined: its default.
 */
export function watchResyncMs(): number | undefined {
  const raw = process.env.AGENT_SESSIONS_WATCH_RESYNC_MS;
  if (raw === undefined || raw === "") return undefined;
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms <= 0)
    throw new UsageError(`AGENT_SESSIONS_WATCH_RESYNC_MS must be a positive whole number of ms, not ${raw}`);
  return ms;
}

/** Wrong flags or arguments: printed with the command's usage, exit 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * A runner config that did not parse (runner/config.ts throws the schema's error, whose issues
 * name the variables) as a usage error listing them; anything else as it is.
 */
export function runnerSettingsError(error: unknown): unknown {
  const issues = (error as { issues?: { path: PropertyKey[]; message: string }[] }).issues;
  if (!issues) return error;
  return new UsageError(issues.map((i) => `${i.path.map(String).join(".")}: ${i.message}`).join("; "));
}

/** A failure the command already explained; exit with `exitCode`. */
export class CommandFailed extends Error {
  override name = "CommandFailed";
  readonly exitCode: number;
  constructor(message: string, exitCode: number) {
    super(message);
    this.exitCode = exitCode;
  }
}

/** An API error with what to do about it in this command's terms. */
export class HintedError extends Error {
  override name = "HintedError";
  readonly error: ClientError;
  readonly hint: string;
  constructor(error: ClientError, hint: string) {
    super(error.message);
    this.error = error;
    this.hint = hint;
  }
}

/** Flags every command takes. */
export const GLOBAL_OPTIONS = {
  server: { type: "string" },
  token: { type: "string" },
  "data-dir": { type: "string" },
  namespace: { type: "string", short: "n" },
  quiet: { type: "boolean", short: "q", default: false },
  json: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const satisfies ParseArgsOptionsConfig;

export type GlobalFlags = {
  server?: string | undefined;
  token?: string | undefined;
  "data-dir"?: string | undefined;
  namespace?: string | undefined;
  quiet?: boolean | undefined;
  json?: boolean | undefined;
};

/** What a command runs with: the client, the resolved global flags and where it writes. */
export type CliContext = {
  client: AgentSessionsClient;
  serverUrl: string;
  namespace: string;
  /** The namespace only when given with -n (apply must not override manifests otherwise). */
  explicitNamespace: string | undefined;
  dataDir: string;
  quiet: boolean;
  json: boolean;
  out(text: string): void;
  /** Progress and notes on stderr; silent with --quiet. */
  note(text: string): void;
  env: NodeJS.ProcessEnv;
};

export const DEFAULT_SERVER_URL = "http://127.0.0.1:8787";

/** `--data-dir`, else $AGENT_SESSIONS_DATA_DIR (the server's), else ./.data: where the CLI finds admin-token and the runner's stacks. */
export function dataDirFrom(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return resolve(flag ?? env.AGENT_SESSIONS_DATA_DIR ?? ".data");
}

/**
 * Resolves the global flags: `--server` (else $AGENT_SESSIONS_SERVER_URL, else http://127.0.0.1:8787),
 * `--token` (else $AGENT_SESSIONS_TOKEN, else `<data-dir>/admin-token`, data dir default ./.data).
 */
export function contextFrom(flags: GlobalFlags, env: NodeJS.ProcessEnv = process.env): CliContext {
  const serverUrl = flags.server ?? env.AGENT_SESSIONS_SERVER_URL ?? DEFAULT_SERVER_URL;
  try {
    new URL(serverUrl);
  } catch {
    throw new UsageError(`--server must be a URL such as ${DEFAULT_SERVER_URL}, got ${serverUrl}`);
  }
  const dataDir = dataDirFrom(flags["data-dir"], env);
  const tokenFile = join(dataDir, "admin-token");
  const token =
    flags.token ??
    env.AGENT_SESSIONS_TOKEN ??
    (existsSync(tokenFile) ? readFileSync(tokenFile, "utf8").trim() : undefined);
  const quiet = flags.quiet ?? false;
  return {
    client: new AgentSessionsClient({ baseUrl: serverUrl, token }),
    serverUrl,
    namespace: flags.namespace ?? "default",
    explicitNamespace: flags.namespace,
    dataDir,
    quiet,
    json: flags.json ?? false,
    out: (text) => process.stdout.write(text.endsWith("\n") ? text : `${text}\n`),
    note: (text) => {
      if (!quiet) process.stderr.write(text.endsWith("\n") ? text : `${text}\n`);
    },
    env,
  };
}

/**
 * The server's messages name HTTP routes (its clients are programs); a person at the CLI is told
 * the command instead. Each entry: what the server says, and the CLI's words for it.
 */
const ROUTE_TO_COMMAND: readonly [RegExp, string][] = [
  [/DELETE \/v1\/tokens\/([A-Za-z0-9._-]+)/g, "`agent-sessions token revoke $1`"],
  [
    /\/v1\/runners\/\{runner\}:drain or :undrain/g,
    "`agent-sessions drain RUNNER` or `agent-sessions undrain RUNNER`",
  ],
];

/** `message` with every HTTP route it names replaced by the CLI command that does the same. */
export function inCliTerms(message: string): string {
  let out = message;
  for (const [route, command] of ROUTE_TO_COMMAND) out = out.replace(route, command);
  return out;
}

/** What to do about an API error, said once under its message. */
export function hintFor(error: ClientError): string | undefined {
  switch (error.code) {
    case "UNAUTHENTICATED":
      return "pass --token TOKEN, set AGENT_SESSIONS_TOKEN, or point --data-dir at the server's data directory (it holds admin-token)";
    case "PERMISSION_DENIED":
      return error.message.includes("runner token")
        ? "that token is a runner token; the client API takes the admin token or an API token"
        : "ask an admin for a token with that scope (`agent-sessions token create --scope …`)";
    case "UNAVAILABLE":
      return error.status === undefined
        ? "is the server running? start one with `agent-sessions serve`, or pass --server URL (or set AGENT_SESSIONS_SERVER_URL)"
        : "the server or its runner cannot do this right now; retry, and check `agent-sessions get sessions`";
    default:
      return undefined;
  }
}

/** Renders a failure on stderr (JSON with --json) and returns the exit code. */
export function report(thrown: unknown, json: boolean): number {
  const error = thrown instanceof HintedError ? thrown.error : thrown;
  if (error instanceof ClientError) {
    const hint = thrown instanceof HintedError ? thrown.hint : hintFor(error);
    const message = inCliTerms(error.message);
    const violations = (error.details?.field_violations ?? []) as { field: string; description: string }[];
    if (json)
      process.stderr.write(
        `${JSON.stringify({ error: { code: error.code, message, details: error.details, hint } })}\n`,
      );
    else {
      let text = `agent-sessions: ${error.code}: ${message}\n`;
      if (violations.length > 1) for (const v of violations) text += `  ${v.field}: ${v.description}\n`;
      if (hint) text += `  hint: ${hint}\n`;
      process.stderr.write(text);
    }
    return exitCodeOf(error.code);
  }
  const exitCode =
    error instanceof UsageError
      ? ExitCode.usage
      : error instanceof CommandFailed
        ? error.exitCode
        : ExitCode.failure;
  const message = error instanceof Error ? error.message : String(error);
  if (json) process.stderr.write(`${JSON.stringify({ error: { message } })}\n`);
  else if (message) process.stderr.write(`agent-sessions: ${message}\n`);
  return exitCode;
}
