import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CommandFailed, dataDirFrom, ExitCode, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { waitRecorded } from "../../stacks/recording.ts";

const USAGE =
  "policy check [-s STACK…] [--expect-no-changes [--refresh]] [--data-dir DIR] [--backend-url URL] [--cwd DIR]   (every stack of the backend without -s)";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** Our Docker provider plugin (stacks/options.ts PLUGIN_BIN_DIR). */
const pluginBinDir = join(repoRoot, "infra", "bin");

/** One policy violation as the engine reported it (its `policyEvent`). */
export type Violation = {
  policyName: string;
  policyPackName: string;
  enforcementLevel: string;
  resourceUrn?: string;
  message: string;
};

type PulumiEnv = Record<string, string>;

/**
 * The environment `pulumi` needs for session stacks: the backend and passphrase the embedded
 * runner keeps under `<data-dir>/runner` (or the ones given), our plugins and the test bed's CLI.
 */
function pulumiEnv(dataDir: string, backendUrl: string | undefined): PulumiEnv {
  const runnerDir = join(dataDir, "runner");
  const backend = backendUrl ?? process.env.PULUMI_BACKEND_URL ?? `file://${join(runnerDir, "pulumi-state")}`;
  if (backend.startsWith("file://") && !existsSync(backend.slice("file://".length)))
    throw new UsageError(
      `no Pulumi state at ${backend}: pass --data-dir of the server whose embedded runner made the stacks, or --backend-url URL`,
    );
  const passphraseFile = join(runnerDir, "pulumi-passphrase");
  const passphrase =
    process.env.PULUMI_CONFIG_PASSPHRASE ??
    (existsSync(passphraseFile) ? readFileSync(passphraseFile, "utf8").trim() : undefined);
  const env: PulumiEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  const pulumiHome = process.env.PULUMI_HOME;
  return {
    ...env,
    PULUMI_BACKEND_URL: backend,
    ...(passphrase !== undefined ? { PULUMI_CONFIG_PASSPHRASE: passphrase } : {}),
    PULUMI_SKIP_UPDATE_CHECK: "1",
    PATH: [
      pluginBinDir,
      dirname(process.execPath),
      ...(pulumiHome ? [`${pulumiHome}/bin`] : []),
      env.PATH ?? "",
    ].join(":"),
  };
}

function listStacks(cwd: string, env: PulumiEnv): string[] {
  const ls = spawnSync("pulumi", ["stack", "ls", "--json", "--non-interactive"], {
    cwd,
    env,
    encoding: "utf8",
  });
  if (ls.error)
    throw new CommandFailed(`cannot run pulumi: ${ls.error.message} (is the Pulumi CLI on PATH?)`, 1);
  if (ls.status !== 0)
    throw new CommandFailed(`pulumi stack ls failed: ${ls.stderr.trim()}`, ExitCode.failure);
  return (JSON.parse(ls.stdout) as { name: string }[]).map((s) => s.name);
}

type EngineEvent = {
  policyEvent?: Violation;
  resourcePreEvent?: { metadata?: { op?: string; type?: string; urn?: string } };
  diagnosticEvent?: { severity?: string; message?: string; urn?: string };
};

/** A progress line for an engine event, or undefined for events people need not see. */
export function progressLine(event: EngineEvent): string | undefined {
  const pre = event.resourcePreEvent?.metadata;
  if (pre?.urn && pre.op && pre.op !== "same")
    return `  ${pre.op} ${pre.type ?? ""} ${pre.urn.split("::").pop()}`;
  const diagnostic = event.diagnosticEvent;
  if (diagnostic?.message && (diagnostic.severity === "error" || diagnostic.severity === "warning"))
    return `  ${diagnostic.severity}: ${diagnostic.message.trim()}`;
  return undefined;
}

/**
 * `pulumi preview --policy-pack policies -s STACK` with the engine's own events streamed as JSON
 * (`--json` with PULUMI_ENABLE_STREAMING_JSON_PREVIEW): progress from resource and diagnostic
 * events, violations from policy events — no text scraping.
 */
async function preview(
  stack: string,
  cwd: string,
  env: PulumiEnv,
  show: boolean,
  runnerDir: string,
  drift: { expectNoChanges: boolean; refresh: boolean },
): Promise<{ exitCode: number | null; violations: Violation[]; changes: string[] }> {
  // The stack's settings and the pack config its last `up` used live under the runner's data dir
  // (stacks/stack-settings.ts, stacks/policy-pack-config.ts).
  const settings = join(runnerDir, "stack-settings", `Pulumi.${stack}.yaml`);
  // A drift check looks at a settled stack: one whose fast-path change is still being recorded
  // (stacks/recording.ts) is waited for, as the runner's next operation on it would.
  if (drift.expectNoChanges && !(await waitRecorded(runnerDir, stack, 120_000)) && show)
    process.stderr.write(`${stack}: its recording is still pending after 120 s; checking anyway\n`);
  const packConfig = join(runnerDir, "policy-config", `${stack}.json`);
  const args = [
    "preview",
    "--policy-pack",
    join(repoRoot, "policies"),
    ...(existsSync(packConfig) ? ["--policy-pack-config", packConfig] : []),
    ...(existsSync(settings) ? ["--config-file", settings] : []),
    ...(drift.expectNoChanges ? ["--expect-no-changes"] : []),
    ...(drift.refresh ? ["--refresh"] : []),
    "--stack",
    stack,
    "--non-interactive",
    "--json",
  ];
  const child = spawn("pulumi", args, {
    cwd,
    env: { ...env, PULUMI_ENABLE_STREAMING_JSON_PREVIEW: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const violations: Violation[] = [];
  /** What the preview would change, as `op type name` (refresh reads are not changes). */
  const changes: string[] = [];
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const lines = createInterface({ input: child.stdout });
  lines.on("line", (line) => {
    let event: EngineEvent;
    try {
      event = JSON.parse(line) as EngineEvent;
    } catch {
      return;
    }
    if (event.policyEvent) violations.push(event.policyEvent);
    const pre = event.resourcePreEvent?.metadata;
    if (pre?.urn && pre.op && !UNCHANGED_OPS.has(pre.op))
      changes.push(`${pre.op} ${pre.type ?? ""} ${pre.urn.split("::").pop()}`);
    const progress = show ? progressLine(event) : undefined;
    if (progress) process.stderr.write(`${progress}\n`);
  });
  const exitCode = await new Promise<number | null>((resolveExit, reject) => {
    child.once("error", (error) =>
      reject(
        new CommandFailed(
          `cannot run pulumi: ${error.message} (is the Pulumi CLI on PATH?)`,
          ExitCode.failure,
        ),
      ),
    );
    child.once("close", (code) => resolveExit(code));
  });
  if (exitCode !== 0 && violations.length === 0 && stderr.trim()) process.stderr.write(stderr);
  return { exitCode, violations, changes };
}

/** Engine step ops that change nothing declared. */
const UNCHANGED_OPS = new Set(["same", "read", "refresh"]);

/**
 * `policy check`: the CrossGuard pack over session stacks, as CI runs it by hand: a
 * `pulumi preview --policy-pack <repo>/policies` of each stack (all of the backend without -s),
 * violations listed at the end; exit 1 on any violation or failed preview.
 */
export const policy: Command = {
  name: "policy",
  usage: USAGE,
  summary: "check session stacks against the policy pack (pulumi preview --policy-pack)",
  flags: [
    ["-s, --stack STACK", "check this stack only; repeatable (default: every session stack)"],
    ["--backend-url URL", "the Pulumi backend (default: <data-dir>/runner's)"],
    ["--cwd DIR", "the Pulumi project directory (default: the repository root)"],
    ["--expect-no-changes", "fail when a stack would change (drift check)"],
    ["--refresh", "refresh from the engine first (with --expect-no-changes: the engine is as declared)"],
  ],
  examples: [
    "agent-sessions policy check --data-dir .data",
    "agent-sessions policy check --expect-no-changes --refresh",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      stack: { type: "string", short: "s", multiple: true },
      "backend-url": { type: "string" },
      cwd: { type: "string" },
      "expect-no-changes": { type: "boolean" },
      refresh: { type: "boolean" },
    });
    const [sub] = positionals(parsed.positionals, ["check"], USAGE);
    if (sub !== "check")
      throw new UsageError(`unknown policy command ${sub}\nusage: agent-sessions ${USAGE}`);
    const json = parsed.values.json;
    const quiet = parsed.values.quiet;
    const cwd = resolve(parsed.values.cwd ?? repoRoot);
    const dataDir = dataDirFrom(parsed.values["data-dir"]);
    const env = pulumiEnv(dataDir, parsed.values["backend-url"]);
    const drift = {
      expectNoChanges: parsed.values["expect-no-changes"] === true,
      refresh: parsed.values.refresh === true,
    };
    if (drift.refresh && !drift.expectNoChanges)
      throw new UsageError(`--refresh goes with --expect-no-changes\nusage: agent-sessions ${USAGE}`);
    const stacks = parsed.values.stack?.length ? parsed.values.stack : listStacks(cwd, env);
    if (stacks.length === 0) {
      if (!quiet) process.stderr.write(`no stacks in ${env.PULUMI_BACKEND_URL}: nothing to check\n`);
      return 0;
    }
    let failed = false;
    for (const stack of stacks) {
      if (!quiet && !json) process.stderr.write(`policy check: ${stack}\n`);
      const { exitCode, violations, changes } = await preview(
        stack,
        cwd,
        env,
        !quiet && !json,
        join(dataDir, "runner"),
        drift,
      );
      if (json)
        process.stdout.write(
          `${JSON.stringify({ stack, exitCode, violations, ...(drift.expectNoChanges ? { changes } : {}) })}\n`,
        );
      else if (violations.length) {
        process.stdout.write(`${stack}: ${violations.length} policy violation(s)\n`);
        for (const v of violations)
          process.stdout.write(
            `  [${v.enforcementLevel}] ${v.policyName}${v.resourceUrn ? ` ${v.resourceUrn.split("::").pop()}` : ""}: ${v.message.trim().split("\n").join(" — ")}\n`,
          );
      } else if (drift.expectNoChanges && changes.length) {
        process.stdout.write(`${stack}: ${changes.length} unexpected change(s)\n`);
        for (const change of changes) process.stdout.write(`  ${change}\n`);
      } else if (exitCode !== 0) process.stdout.write(`${stack}: pulumi preview failed (exit ${exitCode})\n`);
      else if (!quiet)
        process.stdout.write(
          `${stack}: no policy violations${drift.expectNoChanges ? `, no changes${drift.refresh ? " (refreshed)" : ""}` : ""}\n`,
        );
      failed ||= violations.length > 0 || (drift.expectNoChanges && changes.length > 0) || exitCode !== 0;
    }
    return failed ? ExitCode.failure : 0;
  },
};
