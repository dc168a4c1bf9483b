import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { ClientError } from "../../client/client-error.ts";
import { type ManifestKind, PLURAL_OF_KIND } from "../../client/resource-kinds.ts";
import { type CliContext, contextFrom, report, UsageError } from "../cli-context.ts";
import { type Command, parseCommand } from "../command.ts";
import { objectRef } from "../kinds.ts";
import { waitForPhase } from "../wait.ts";

const USAGE = "apply -f FILE|- [-f FILE…] [-n NAMESPACE] [--wait] [--timeout 10m]";

type Manifest = { kind: ManifestKind; metadata: { name: string; namespace?: string } } & Record<
  string,
  unknown
>;

/** Every YAML document of the inputs, in order, checked just enough to know where it goes. */
export function readManifests(
  files: string[],
  readStdin: () => string,
): { source: string; manifest: Manifest }[] {
  const out: { source: string; manifest: Manifest }[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = file === "-" ? readStdin() : readFileSync(file, "utf8");
    } catch (error) {
      throw new UsageError(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
    }
    const label = file === "-" ? "stdin" : file;
    parseAllDocuments(text).forEach((doc, index) => {
      const where = `${label} document ${index + 1}`;
      if (doc.errors.length) throw new UsageError(`${where} is not valid YAML: ${doc.errors[0]?.message}`);
      const value: unknown = doc.toJS();
      if (value === null || value === undefined) return; // an empty document (e.g. a trailing ---)
      if (typeof value !== "object" || Array.isArray(value))
        throw new UsageError(`${where} is not a manifest (an object with apiVersion, kind, metadata, spec)`);
      const m = value as { kind?: unknown; metadata?: { name?: unknown; namespace?: unknown } };
      if (typeof m.kind !== "string" || !(m.kind in PLURAL_OF_KIND))
        throw new UsageError(
          `${where}: kind must be one of ${Object.keys(PLURAL_OF_KIND).join(", ")}, got ${String(m.kind)}`,
        );
      if (typeof m.metadata?.name !== "string") throw new UsageError(`${where}: metadata.name is required`);
      out.push({ source: where, manifest: value as Manifest });
    });
  }
  return out;
}

/** `apply` creates or replaces; `create` creates only (a name in use is ALREADY_EXISTS). */
type Mode = "apply" | "create";

async function applyOne(
  ctx: CliContext,
  manifest: Manifest,
  mode: Mode,
): Promise<{ ref: string; action: string; namespace: string; secret?: string }> {
  const plural = PLURAL_OF_KIND[manifest.kind];
  const given = manifest.metadata.namespace;
  if (ctx.explicitNamespace && given && given !== ctx.explicitNamespace)
    throw new UsageError(
      `${manifest.kind} ${manifest.metadata.name} says namespace ${given} but -n says ${ctx.explicitNamespace}; drop one`,
    );
  const namespace = given ?? ctx.namespace;
  const body = { ...manifest, metadata: { ...manifest.metadata, namespace } };
  // The server validates the whole manifest; the CLI only routes it.
  let created = true;
  let answer: unknown;
  let unchanged = false;
  if (mode === "create") answer = await ctx.client.create(plural, body as never);
  else ({ created, unchanged, resource: answer } = await ctx.client.put(plural, body as never));
  // A Webhook created without a secret answers the one generated for it, this once (issue 40).
  const secret = (answer as { spec?: { secret?: unknown } } | undefined)?.spec?.secret;
  return {
    ref: objectRef(plural, manifest.metadata.name),
    // kubectl's words: "unchanged" when the server had this very object (nothing written, no new generation).
    action: created ? "created" : unchanged ? "unchanged" : "configured",
    namespace,
    ...(manifest.kind === "Webhook" && typeof secret === "string" ? { secret } : {}),
  };
}

/** `apply`: PUT each document of the inputs to its kind's path, in order. */
export const apply: Command = {
  name: "apply",
  usage: USAGE,
  summary: "create or replace resources from YAML manifests (multi-document)",
  description: `Creates or replaces each document of the files, in order (any kind: AgentRuntime, Agent,
HarnessSession, …). Each prints "KIND/NAME created", "configured" (replaced) or "unchanged" (the
server had this very object: nothing written, the generation stays). A failed document does not
stop the others; the exit code is the first failure's.`,
  flags: [
    ["-f, --filename FILE", "a YAML file (several documents separated by ---); - reads stdin; repeatable"],
    ["--wait", "then wait until each HarnessSession is Ready (or Stopped when desiredState: stopped)"],
    ["--timeout DURATION", "how long --wait waits (default 10m)"],
  ],
  examples: [
    "agent-sessions apply -f session.yaml               # create or replace",
    "agent-sessions apply -f session.yaml --wait         # and wait until it is Ready",
    "cat all.yaml | agent-sessions apply -f - -n team-a  # every document into namespace team-a",
  ],
  run: (argv) => applyManifests(argv, "apply", USAGE),
};

/**
 * `apply` and `create` (bin/commands/create.ts): each document in order, going on after a
 * failure like kubectl; the exit code says the first one.
 */
export async function applyManifests(argv: string[], mode: Mode, usage: string): Promise<number> {
  const { values, positionals } = parseCommand(argv, usage, {
    filename: { type: "string", short: "f", multiple: true },
    wait: { type: "boolean", default: false },
    timeout: { type: "string", default: "10m" },
  });
  if (positionals.length) throw new UsageError(`unexpected argument ${positionals[0]}; pass files with -f`);
  if (!values.filename?.length)
    throw new UsageError(`-f FILE (or -f - for stdin) is required\nusage: agent-sessions ${usage}`);
  const ctx = contextFrom(values);
  const manifests = readManifests(values.filename, () => readFileSync(0, "utf8"));
  if (manifests.length === 0) throw new UsageError("no manifests in the input");
  let exitCode = 0;
  const sessions: { namespace: string; name: string; target: "Ready" | "Stopped" }[] = [];
  for (const { source, manifest } of manifests) {
    try {
      const result = await applyOne(ctx, manifest, mode);
      if (ctx.json)
        ctx.out(
          JSON.stringify({
            kind: manifest.kind,
            namespace: result.namespace,
            name: manifest.metadata.name,
            action: result.action,
            ...(result.secret !== undefined ? { secret: result.secret } : {}),
          }),
        );
      else if (!ctx.quiet) ctx.out(`${result.ref} ${result.action}`);
      if (result.secret !== undefined && !ctx.json) {
        ctx.note(`${result.ref}: its signing secret was generated and is shown once, on the next line`);
        ctx.out(result.secret);
      }
      if (manifest.kind === "HarnessSession") {
        const spec = manifest.spec as { desiredState?: string } | undefined;
        const target = spec?.desiredState === "stopped" ? "Stopped" : "Ready";
        sessions.push({ namespace: result.namespace, name: manifest.metadata.name, target });
      }
    } catch (error) {
      // Go on with the rest, like kubectl; the exit code says the first failure.
      if (error instanceof ClientError && !ctx.json)
        process.stderr.write(`agent-sessions: ${source} (${manifest.kind} ${manifest.metadata.name}):\n`);
      const code = report(error, ctx.json);
      if (exitCode === 0) exitCode = code;
    }
  }
  if (values.wait && exitCode === 0)
    for (const s of sessions) await waitForPhase(ctx, s.namespace, s.name, s.target, values.timeout);
  return exitCode;
}
