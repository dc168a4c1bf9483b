import { createReadStream, createWriteStream } from "node:fs";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { SessionSnapshot } from "../../contracts/session-snapshot.ts";
import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { age, formatData, parseOutput, table } from "../render.ts";
import { waitForPhase } from "../wait.ts";

/**
 * The SessionSnapshot commands (issue 38; docs/cli.md): take one of a session, list them, fork
 * one into a new session, restore a session to one, export one to a file and import one from a
 * file, delete one.
 */
export function snapshotTable(items: readonly SessionSnapshot[]): string {
  return table(
    ["NAME", "SESSION", "AGENT", "RUNTIME", "PHASE", "SIZE", "RUNNER", "AGE"],
    items.map((s) => [
      s.metadata.name,
      s.spec.sessionRef,
      s.spec.agentRef,
      s.spec.runtimeRef,
      s.status.phase,
      s.status.sizeBytes === undefined ? "-" : String(s.status.sizeBytes),
      s.status.runner ?? "-",
      age(s.metadata.creationTimestamp),
    ]),
  );
}

const SNAPSHOT_USAGE = "snapshot SESSION NAME [-n NAMESPACE]   (its files and its conversation)";

export const snapshot: Command = {
  name: "snapshot",
  usage: SNAPSHOT_USAGE,
  summary: "take a snapshot of a HarnessSession's volume (running, paused or stopped)",
  async run(argv) {
    const parsed = parseCommand(argv, SNAPSHOT_USAGE, {});
    const [session = "", name = ""] = positionals(parsed.positionals, ["SESSION", "NAME"], SNAPSHOT_USAGE);
    const ctx = contextFrom(parsed.values);
    const taken = await ctx.client.snapshot(ctx.namespace, session, name);
    if (ctx.json) ctx.out(JSON.stringify(taken));
    else if (!ctx.quiet)
      ctx.out(
        `sessionsnapshot/${name} taken of harnesssession/${session} (${taken.status.sizeBytes ?? 0} bytes)`,
      );
    return 0;
  },
};

const LIST_USAGE = "snapshots [-n NAMESPACE] [-o table|json|yaml]";

export const snapshots: Command = {
  name: "snapshots",
  usage: LIST_USAGE,
  summary: "list a namespace's snapshots",
  async run(argv) {
    const parsed = parseCommand(argv, LIST_USAGE, { output: { type: "string", short: "o" } });
    positionals(parsed.positionals, [], LIST_USAGE);
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    const items: SessionSnapshot[] = [];
    let next: string | undefined;
    do {
      const page = await ctx.client.snapshots(ctx.namespace, next === undefined ? {} : { continue: next });
      items.push(...page.items);
      next = page.metadata.continue;
    } while (next !== undefined);
    if (format !== "table") ctx.out(formatData({ items }, format));
    else if (items.length === 0) ctx.note(`no snapshots in namespace ${ctx.namespace}`);
    else ctx.out(snapshotTable(items));
    return 0;
  },
};

const FORK_USAGE = "fork SNAPSHOT NEW-SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]";

export const fork: Command = {
  name: "fork",
  usage: FORK_USAGE,
  summary: "create a HarnessSession from a snapshot: its files and conversation, then on its own",
  async run(argv) {
    const parsed = parseCommand(argv, FORK_USAGE, {
      "no-wait": { type: "boolean", default: false },
      timeout: { type: "string", default: "10m" },
    });
    const [from = "", name = ""] = positionals(parsed.positionals, ["SNAPSHOT", "NEW-SESSION"], FORK_USAGE);
    const ctx = contextFrom(parsed.values);
    const source = await ctx.client.getSnapshot(ctx.namespace, from);
    const created = await ctx.client.create("harnesssessions", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name, namespace: ctx.namespace },
      spec: {
        agentRef: source.spec.agentRef,
        runtimeRef: source.spec.runtimeRef,
        source: { snapshotRef: from },
      },
    });
    const session = parsed.values["no-wait"]
      ? created
      : await waitForPhase(
          ctx,
          ctx.namespace,
          name,
          "Ready",
          parsed.values.timeout,
          created.metadata.generation,
        );
    if (ctx.json)
      ctx.out(JSON.stringify({ name, namespace: ctx.namespace, from, phase: session.status.phase }));
    else if (!ctx.quiet)
      ctx.out(`harnesssession/${name} forked from sessionsnapshot/${from} (phase ${session.status.phase})`);
    return 0;
  },
};

const RESTORE_USAGE = "restore SESSION SNAPSHOT [-n NAMESPACE]   (what came after the snapshot is gone)";

export const restore: Command = {
  name: "restore",
  usage: RESTORE_USAGE,
  summary: "return a HarnessSession's volume to a snapshot (stopped, restored, brought back)",
  async run(argv) {
    const parsed = parseCommand(argv, RESTORE_USAGE, {});
    const [session = "", from = ""] = positionals(parsed.positionals, ["SESSION", "SNAPSHOT"], RESTORE_USAGE);
    const ctx = contextFrom(parsed.values);
    const restored = await ctx.client.restore(ctx.namespace, session, from);
    if (ctx.json) ctx.out(JSON.stringify({ ...restored, phase: restored.session.status.phase }));
    else if (!ctx.quiet) ctx.out(`harnesssession/${session} ${restored.message}`);
    return 0;
  },
};

const EXPORT_USAGE = "export-snapshot SNAPSHOT FILE [-n NAMESPACE]   (a gzip tar, manifest.json first)";

export const exportSnapshot: Command = {
  name: "export-snapshot",
  usage: EXPORT_USAGE,
  summary: "write a snapshot's portable archive to a file",
  async run(argv) {
    const parsed = parseCommand(argv, EXPORT_USAGE, {});
    const [name = "", file = ""] = positionals(parsed.positionals, ["SNAPSHOT", "FILE"], EXPORT_USAGE);
    const ctx = contextFrom(parsed.values);
    const body = await ctx.client.exportSnapshot(ctx.namespace, name);
    await pipeline(
      Readable.fromWeb(body as import("node:stream/web").ReadableStream),
      createWriteStream(file, { mode: 0o600 }),
    );
    if (!ctx.quiet && !ctx.json) ctx.out(`sessionsnapshot/${name} exported to ${file}`);
    return 0;
  },
};

const IMPORT_USAGE =
  "import-snapshot SNAPSHOT FILE [-n NAMESPACE] [--engine docker|kubernetes]   (an archive as exported)";

export const importSnapshot: Command = {
  name: "import-snapshot",
  usage: IMPORT_USAGE,
  summary: "import a snapshot archive from a file into a namespace",
  async run(argv) {
    const parsed = parseCommand(argv, IMPORT_USAGE, { engine: { type: "string" } });
    const [name = "", file = ""] = positionals(parsed.positionals, ["SNAPSHOT", "FILE"], IMPORT_USAGE);
    const engine = parsed.values.engine;
    if (engine !== undefined && engine !== "docker" && engine !== "kubernetes")
      throw new UsageError(`--engine must be docker or kubernetes, got ${engine}`);
    const ctx = contextFrom(parsed.values);
    const body = Readable.toWeb(createReadStream(file)) as ReadableStream<Uint8Array>;
    const imported = await ctx.client.importSnapshot(ctx.namespace, name, body, engine ? { engine } : {});
    if (ctx.json) ctx.out(JSON.stringify(imported));
    else if (!ctx.quiet)
      ctx.out(
        `sessionsnapshot/${name} imported onto runner ${imported.status.runner ?? "?"} (${imported.status.sizeBytes ?? 0} bytes)`,
      );
    return 0;
  },
};

const DELETE_USAGE = "delete-snapshot SNAPSHOT [-n NAMESPACE]   (frees its storage on its runner)";

export const deleteSnapshot: Command = {
  name: "delete-snapshot",
  usage: DELETE_USAGE,
  summary: "delete a snapshot and free its storage",
  async run(argv) {
    const parsed = parseCommand(argv, DELETE_USAGE, {});
    const [name = ""] = positionals(parsed.positionals, ["SNAPSHOT"], DELETE_USAGE);
    const ctx = contextFrom(parsed.values);
    await ctx.client.deleteSnapshot(ctx.namespace, name);
    if (ctx.json)
      ctx.out(
        JSON.stringify({ kind: "sessionsnapshots", namespace: ctx.namespace, name, action: "deleted" }),
      );
    else if (!ctx.quiet) ctx.out(`sessionsnapshot/${name} deleted`);
    return 0;
  },
};
