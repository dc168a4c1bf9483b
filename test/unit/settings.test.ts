import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { ServerEnv } from "../../proxy/config.ts";
import { RunnerEnv } from "../../runner/config.ts";

// One reader of the environment per process (issue 33): the server's settings are read by
// proxy/config.ts alone, the runner's by runner/config.ts alone, each one zod schema keyed by
// variable name; docs/configuration.md lists every variable of both. Anything else that reads an
// AGENT_SESSIONS_* variable is listed below, with why.

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const DOC = "docs/configuration.md";

/** The two settings files: the only modules that may read AGENT_SESSIONS_* settings. */
const SETTINGS_FILES = ["proxy/config.ts", "runner/config.ts"];

type Exception = {
  file: string;
  variables: readonly string[];
  reader: "CLI" | "runner pod" | "Docker session provider";
  why: string;
};

/** Readers of AGENT_SESSIONS_* variables outside the two schemas, each with its reason. */
const EXCEPTIONS: readonly Exception[] = [
  {
    file: "bin/cli-context.ts",
    variables: [
      "AGENT_SESSIONS_SERVER_URL",
      "AGENT_SESSIONS_TOKEN",
      "AGENT_SESSIONS_DATA_DIR",
      "AGENT_SESSIONS_WATCH_RESYNC_MS",
    ],
    reader: "CLI",
    why:
      "the client commands' globals (defaults of --server, --token, --data-dir): the CLI is a client " +
      "of the server, neither server nor runner, and reads the same names so one exported " +
      "environment serves the server, its runner and the commands that talk to it; and how often " +
      "`get hs -w` lists again beside the event stream (a client's own pace)",
  },
  {
    file: "bin/testbed-image.ts",
    variables: ["AGENT_SESSIONS_TESTBED_HOME"],
    reader: "CLI",
    why:
      "where scripts/testbed keeps the images it built: `serve` and `runner` offer them as the " +
      "fallback of the image settings; a development convenience, not a setting of either process",
  },
  {
    file: "infra/control-plane/runner-entrypoint.sh",
    variables: ["AGENT_SESSIONS_STATE_DIR"],
    reader: "runner pod",
    why:
      "the control plane's runner pod: its entrypoint script lays out the pod's volume before the " +
      "runner starts (a shell script, so no scan below sees it; listed so the docs may name it)",
  },
  {
    file: "infra/docker/provider/provider.ts",
    variables: ["AGENT_SESSIONS_RECORD_ONLY"],
    reader: "Docker session provider",
    why:
      "the runner's signal to the provider plugin of one `up` that records what its fast path made " +
      "(stacks/stack-manager.ts): the plugin is a process of the Pulumi CLI, reached only through " +
      "the environment; set by the runner per `up`, never by a person",
  },
];

/** Folders of code that runs in the CLI, server or runner (or is imported by them). */
const PRODUCT_DIRS = new Set([
  "bin",
  "client",
  "contracts",
  "infra",
  "policies",
  "proxy",
  "runner",
  "stacks",
]);

/**
 * Source files scanned: every .ts file but tests and test/ (tests and their support SET variables
 * for the processes they start, or read the test bed's own; they are not the product's readers).
 */
function sourceFiles(dir = ROOT): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    const rel = relative(ROOT, path);
    if (entry.isDirectory()) {
      if (entry.name === "node_modules" || entry.name.startsWith(".") || rel === "test") continue;
      files.push(...sourceFiles(path));
    } else if (
      entry.name.endsWith(".ts") &&
      !entry.name.endsWith(".test.ts") &&
      !entry.name.endsWith(".d.ts")
    )
      files.push(rel);
  }
  return files;
}

type Read = { file: string; line: number; variable: string; how: string };

const isProcessEnv = (node: ts.Node): boolean =>
  ts.isPropertyAccessExpression(node) &&
  ts.isIdentifier(node.expression) &&
  node.expression.text === "process" &&
  node.name.text === "env";

/**
 * Where a module reads the environment in a way the rule covers: `x.AGENT_SESSIONS_…` or
 * `x["AGENT_SESSIONS_…"]` on any object (process.env, an alias of it, a parameter defaulting to
 * it), a destructuring of process.env, and (in product code) `process.env[expression]`, whose
 * name no scan can see. Strings and comments that name a variable are not reads.
 */
function envReads(file: string, text: string): Read[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const reads: Read[] = [];
  const product = PRODUCT_DIRS.has(file.split("/")[0] ?? "");
  const add = (node: ts.Node, variable: string, how: string) =>
    reads.push({ file, line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1, variable, how });
  const visit = (node: ts.Node): void => {
    if (ts.isPropertyAccessExpression(node) && node.name.text.startsWith("AGENT_SESSIONS_"))
      add(node, node.name.text, `.${node.name.text}`);
    if (ts.isElementAccessExpression(node)) {
      const key = node.argumentExpression;
      if (ts.isStringLiteralLike(key) && key.text.startsWith("AGENT_SESSIONS_"))
        add(node, key.text, `["${key.text}"]`);
      else if (ts.isTemplateExpression(key) && key.head.text.startsWith("AGENT_SESSIONS_"))
        add(node, `${key.head.text}…`, "[`AGENT_SESSIONS_…` template]");
      else if (product && isProcessEnv(node.expression) && !ts.isStringLiteralLike(key))
        add(node, "?", `process.env[${key.getText(source)}]`);
    }
    if (
      (ts.isVariableDeclaration(node) || ts.isParameter(node)) &&
      ts.isObjectBindingPattern(node.name) &&
      node.initializer !== undefined &&
      isProcessEnv(node.initializer)
    )
      add(node, "?", `{ … } = process.env`);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return reads;
}

/** The reads outside the settings files that no exception allows. */
function strayReads(files: readonly string[], read: (file: string) => string): Read[] {
  return (
    files
      .filter((file) => !SETTINGS_FILES.includes(file))
      .map((file) => ({ file, text: read(file) }))
      // Parsing every module takes seconds; one that names neither cannot read a setting.
      .filter(({ text }) => text.includes("AGENT_SESSIONS_") || text.includes("process.env"))
      .flatMap(({ file, text }) => envReads(file, text))
      .filter((r) => !EXCEPTIONS.some((e) => e.file === r.file && e.variables.includes(r.variable)))
  );
}

const serverVariables = Object.keys(ServerEnv.shape);
const runnerVariables = Object.keys(RunnerEnv.shape);
const exceptionVariables = EXCEPTIONS.flatMap((e) => e.variables);

/** Which processes read a variable, as docs/configuration.md's "Read by" column names them. */
function readersOf(variable: string): string[] {
  return [
    ...(serverVariables.includes(variable) ? ["server"] : []),
    ...(runnerVariables.includes(variable) ? ["runner"] : []),
    ...EXCEPTIONS.filter((e) => e.variables.includes(variable)).map((e) => e.reader),
  ];
}

/** What a schema makes of an unset variable: `{ value }` (its default), or `required`. */
function unsetValue(variable: string): { value: unknown } | "required" | undefined {
  const schema =
    (ServerEnv.shape as Record<string, z.ZodType>)[variable] ??
    (RunnerEnv.shape as Record<string, z.ZodType>)[variable];
  if (!schema) return undefined;
  const parsed = schema.safeParse(undefined);
  return parsed.success ? { value: parsed.data } : "required";
}

/** The default a schema gives an unset variable, when it is a plain value the docs must state. */
function plainDefault(variable: string): string | undefined {
  if (variable === "AGENT_SESSIONS_RUNNER_NAME") return undefined; // the host name
  const unset = unsetValue(variable);
  return typeof unset === "object" && (typeof unset.value === "number" || typeof unset.value === "string")
    ? String(unset.value)
    : undefined;
}

/** A row to paste for a variable the docs lack: its default as the schema has it, to be worded. */
function rowStub(variable: string): string {
  const unset = unsetValue(variable);
  const shown =
    unset === undefined
      ? "?"
      : unset === "required"
        ? "required"
        : unset.value === undefined
          ? "unset"
          : JSON.stringify(unset.value);
  return `| \`${variable}\` | ${shown} | ? | ${readersOf(variable).join(", ")} |`;
}

type Row = { variable: string; cells: string[]; line: string };

/** Table rows of a Markdown document whose first cell is a `VARIABLE`. */
function variableRows(markdown: string): Row[] {
  return markdown.split("\n").flatMap((line) => {
    if (!line.startsWith("|")) return [];
    const cells = line
      .split(/(?<!\\)\|/)
      .slice(1, -1)
      .map((c) => c.trim());
    const m = /^`([A-Z][A-Z0-9_]*)`$/.exec(cells[0] ?? "");
    return m?.[1] ? [{ variable: m[1], cells, line }] : [];
  });
}

/** What is wrong with the docs: variables without a row, rows without a variable, wrong defaults or readers. */
function docProblems(markdown: string): string[] {
  const rows = variableRows(markdown);
  const known = new Set([...serverVariables, ...runnerVariables, ...exceptionVariables]);
  const problems: string[] = [];
  for (const variable of known) {
    const mine = rows.filter((r) => r.variable === variable);
    const fallback = plainDefault(variable);
    if (mine.length === 0) {
      problems.push(`missing: ${rowStub(variable)}`);
      continue;
    }
    if (fallback !== undefined && !mine.some((r) => (r.cells[1] ?? "").includes(fallback)))
      problems.push(`${variable}: its default column does not say ${fallback}`);
    const readBy = mine.map((r) => r.cells.at(-1) ?? "").join(" ");
    for (const reader of readersOf(variable))
      if (!readBy.includes(reader))
        problems.push(`${variable}: its "Read by" column does not name the ${reader}`);
  }
  for (const m of markdown.matchAll(/\bAGENT_SESSIONS_[A-Z0-9_]*[A-Z0-9]\b(?!\*)/g))
    if (!known.has(m[0])) problems.push(`${DOC} names ${m[0]}, which no schema or exception knows`);
  return [...new Set(problems)];
}

const readSource = (file: string) => readFileSync(join(ROOT, file), "utf8");

describe("settings: one reader of the environment per process", () => {
  it("reads no AGENT_SESSIONS_* variable outside proxy/config.ts, runner/config.ts and the listed CLI globals", () => {
    const stray = strayReads(sourceFiles(), readSource);
    expect(stray.map((r) => `${r.file}:${r.line} reads ${r.how}`)).toEqual([]);
  });

  it("sees reads by property, by literal key, by template key, by destructuring and by computed key", () => {
    const reads = envReads(
      "runner/example.ts",
      [
        "const a = process.env.AGENT_SESSIONS_FAST_PATH;",
        'const b = process.env["AGENT_SESSIONS_ENGINE"];',
        "const env = process.env; const c = env.AGENT_SESSIONS_RUNNER_NAME;",
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the source text of a template literal
        "const d = process.env[`AGENT_SESSIONS_${kind}_IMAGE`];",
        "const { AGENT_SESSIONS_PORT } = process.env;",
        "const e = process.env[name];",
        '// process.env.AGENT_SESSIONS_IN_A_COMMENT; const s = "process.env.AGENT_SESSIONS_IN_A_STRING";',
        'const ok = process.env.PATH; const set = { AGENT_SESSIONS_TOKEN: "x" };',
      ].join("\n"),
    );
    expect(reads.map((r) => `${r.line} ${r.how}`)).toEqual([
      "1 .AGENT_SESSIONS_FAST_PATH",
      '2 ["AGENT_SESSIONS_ENGINE"]',
      "3 .AGENT_SESSIONS_RUNNER_NAME",
      "4 [`AGENT_SESSIONS_…` template]",
      "5 { … } = process.env",
      "6 process.env[name]",
    ]);
    // Runtimes run in session containers with settings of their own: a computed key is theirs.
    expect(envReads("runtimes/pi/agent.ts", "const key = process.env[settings.apiKeyEnv];")).toEqual([]);
  });

  it("lists exceptions that still hold: each file exists and names each of its variables", () => {
    for (const e of EXCEPTIONS) {
      expect(existsSync(join(ROOT, e.file)), e.file).toBe(true);
      for (const variable of e.variables)
        expect(readSource(e.file), `${e.file} ${variable}`).toContain(variable);
    }
  });
});

describe(`settings: ${DOC} lists every setting`, () => {
  it("has a row for every variable of both schemas and the exceptions, with its default and its readers, and names no other", () => {
    expect(docProblems(readSource(DOC))).toEqual([]);
  });

  it("finds a missing row, a wrong default, a missing reader and an unknown variable", () => {
    const rows = readSource(DOC)
      .split("\n")
      .filter((line) => !line.startsWith("| `AGENT_SESSIONS_HEARTBEAT_MS`"))
      .map((line) => (line.startsWith("| `AGENT_SESSIONS_PORT`") ? line.replace("8787", "8080") : line))
      .map((line) =>
        line.startsWith("| `AGENT_SESSIONS_ENGINE`") ? line.replace(/runner\s*\|$/, "|") : line,
      );
    expect(docProblems(`${rows.join("\n")}\nAGENT_SESSIONS_NO_SUCH_SETTING\n`)).toEqual([
      "AGENT_SESSIONS_PORT: its default column does not say 8787",
      "missing: | `AGENT_SESSIONS_HEARTBEAT_MS` | 5000 | ? | server |",
      'AGENT_SESSIONS_ENGINE: its "Read by" column does not name the runner',
      `${DOC} names AGENT_SESSIONS_NO_SUCH_SETTING, which no schema or exception knows`,
    ]);
  });
});
