import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

// Comments and documents cite files by their repository path ("see runner/engine/driver.ts"),
// and a move must not leave them pointing nowhere: every cited path exists. Nothing cites a
// document that is not in this repository (a design note kept elsewhere is a dead end for a
// reader of the code): what such a note says belongs in docs/ or in the comment itself.

const REPO = join(dirname(fileURLToPath(import.meta.url)), "../..");

/** Top-level folders and files a citation may start with (the repository's own). */
const ROOTS = [
  "bin",
  "client",
  "contracts",
  "docs",
  "infra",
  "policies",
  "proxy",
  "runner",
  "runtimes",
  "scripts",
  "stacks",
  "test",
];
const ROOT_FILES = [
  "README.md",
  "Pulumi.yaml",
  "package.json",
  "tsconfig.json",
  "vitest.config.ts",
  "biome.json",
];

/** Documents of the project's makers that are not in this repository. */
const OUTSIDE_DOCUMENTS =
  /(?<![\w/.-])(?:\.\.\/shared\/|\/work\/shared\/|shared\/)?(DESIGN|TESTBED|STYLE|DEVELOPERS)\.md\b/g;

/**
 * Names of things that do not exist on purpose: runtimes/README.md walks through adding a fifth
 * runtime called `nova` (runtimes/nova/, scripts/testbed.d/nova-image.sh, …).
 */
const WORKED_EXAMPLES = /(^|\/)nova[^/]*($|\/)|\/nova\.[a-z]/;

type Citation = { file: string; line: number; cited: string };

const PATH_CHARS = "[A-Za-z0-9_.@/-]";
const CITED = new RegExp(
  `(?<![\\w.@/<>$:-])((?:${ROOTS.join("|")})/${PATH_CHARS}*[A-Za-z0-9_-]|(?:${ROOT_FILES.map((f) => f.replace(".", "\\.")).join("|")})(?![\\w-]))`,
  "g",
);

/** Repository paths cited in one file's text (globs, placeholders and URLs left out). */
function citationsIn(file: string, text: string): Citation[] {
  const found: Citation[] = [];
  text.split("\n").forEach((content, index) => {
    for (const m of content.matchAll(CITED)) {
      const cited = m[1] ?? "";
      const after = content.slice((m.index ?? 0) + m[0].length);
      // A glob, a placeholder (`runner/<engine>/`) or a template (`${dir}`) names no one file.
      if (/^[*{<$]/.test(after) || /^\/?[*{<$]/.test(after)) continue;
      // Part of a URL or of an absolute path inside an image or a machine (/app/runtimes/…).
      const before = content.slice(0, m.index ?? 0);
      if (/(https?:\/\/|:\/\/)\S*$/.test(before)) continue;
      // Another project's document, cited as theirs ("pi's docs/rpc.md").
      if (/\w's `?$/.test(before)) continue;
      // A test's made-up path in a string literal ("proxy/store/x.ts") is data, not a citation.
      if (file.endsWith(".test.ts") && /["'`]$/.test(before)) continue;
      found.push({ file, line: index + 1, cited: cited.replace(/[.-]+$/, "") });
    }
  });
  return found;
}

/** Markdown link targets that are repository-relative paths (resolved from the document's folder). */
function linksIn(file: string, text: string): Citation[] {
  const found: Citation[] = [];
  text.split("\n").forEach((content, index) => {
    for (const m of content.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
      const target = m[1] ?? "";
      if (/^[a-z]+:/.test(target) || target.startsWith("/")) continue;
      found.push({ file, line: index + 1, cited: normalize(join(dirname(file), target)) });
    }
  });
  return found;
}

function outsideDocumentsIn(file: string, text: string): Citation[] {
  const found: Citation[] = [];
  text.split("\n").forEach((content, index) => {
    for (const m of content.matchAll(OUTSIDE_DOCUMENTS)) found.push({ file, line: index + 1, cited: m[0] });
  });
  return found;
}

function trackedSources(): string[] {
  const listed = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard"], {
    cwd: REPO,
    encoding: "utf8",
  });
  return listed
    .split("\n")
    .filter((f) => /\.(ts|md)$/.test(f) && existsSync(join(REPO, f)))
    .filter((f) => f !== "test/unit/cited-paths.test.ts");
}

/** The comment part of a line of TypeScript ("" when it has none). */
function commentOf(line: string): string {
  const trimmed = line.trimStart();
  if (/^(\/\/|\/\*|\*)/.test(trimmed)) return trimmed;
  const at = line.indexOf(" // ");
  return at >= 0 ? line.slice(at) : "";
}

/** Bare file names ("kubernetes-exec.ts's watch") cited without their folder. */
function bareNamesIn(file: string, text: string): Citation[] {
  const found: Citation[] = [];
  text.split("\n").forEach((line, index) => {
    // In code, only comments cite (`frame.ts` in code is a property).
    const content = file.endsWith(".ts") ? commentOf(line) : line;
    for (const m of content.matchAll(
      /(?<![\w.@/<>$:*{-])([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*\.(?:ts|md|sh))(?![\w/-])/g,
    )) {
      const before = content.slice(0, m.index ?? 0);
      if (/\w's `?$/.test(before) || (file.endsWith(".test.ts") && /["'`]$/.test(before))) continue;
      found.push({ file, line: index + 1, cited: m[1] ?? "" });
    }
  });
  return found;
}

const show = (c: Citation) => `${c.file}:${c.line} cites ${c.cited}`;

/**
 * A build output the repository ignores (`/client/dist/`, made by `npm pack` in client/): cited by
 * what makes it, absent from a fresh clone until then. Asked of git itself, so only what
 * .gitignore names is let through.
 */
function ignoredOutput(path: string): boolean {
  const bare = path.replace(/\/$/, "");
  // A pattern with a trailing slash names a directory: absent, the path is asked as one too.
  for (const asked of [bare, `${bare}/`])
    try {
      execFileSync("git", ["check-ignore", "-q", "--no-index", asked], { cwd: REPO });
      return true;
    } catch {}
  return false;
}

describe("cited paths", () => {
  it("every repository path cited in a .ts or .md file exists", () => {
    const missing = trackedSources().flatMap((file) => {
      const text = readFileSync(join(REPO, file), "utf8");
      const cited = [...citationsIn(file, text), ...(file.endsWith(".md") ? linksIn(file, text) : [])];
      return cited
        .filter((c) => !existsSync(join(REPO, c.cited)) && !WORKED_EXAMPLES.test(c.cited))
        .filter((c) => !ignoredOutput(c.cited))
        .map(show);
    });
    expect(missing).toEqual([]);
  });

  it("every bare file name cited names a file of the repository", () => {
    const names = new Set(trackedSources().map((f) => f.split("/").pop()));
    for (const f of execFileSync("git", ["ls-files"], { cwd: REPO, encoding: "utf8" }).split("\n"))
      names.add(f.split("/").pop());
    const unknown = trackedSources().flatMap((file) =>
      bareNamesIn(file, readFileSync(join(REPO, file), "utf8"))
        .filter((c) => !names.has(c.cited))
        .map(show),
    );
    expect(unknown).toEqual([]);
  });

  it("nothing cites a document outside the repository", () => {
    const outside = trackedSources().flatMap((file) =>
      outsideDocumentsIn(file, readFileSync(join(REPO, file), "utf8")).map(show),
    );
    expect(outside).toEqual([]);
  });

  it("finds a moved file, a dead link and a note kept elsewhere", () => {
    expect(
      citationsIn("a.ts", " * see runner/kubernetes-workspace.ts and `runner/<engine>/driver.ts`"),
    ).toEqual([{ file: "a.ts", line: 1, cited: "runner/kubernetes-workspace.ts" }]);
    expect(
      citationsIn("a.md", "image /app/runtimes/reference/agent.ts, http://x/runner/y.ts, infra/*.ts"),
    ).toEqual([]);
    expect(citationsIn("a.md", "(see proxy/PROTOCOL.md).")).toEqual([
      { file: "a.md", line: 1, cited: "proxy/PROTOCOL.md" },
    ]);
    expect(linksIn("docs/cli.md", "[config](configuration.md#server) [site](https://hono.dev)")).toEqual([
      { file: "docs/cli.md", line: 1, cited: "docs/configuration.md" },
    ]);
    expect(citationsIn("c.ts", "// pi's docs/rpc.md; POST /:runner/token")).toEqual([]);
    expect(citationsIn("c.test.ts", 'const f = "proxy/store/x.ts"; // proxy/x.ts')).toEqual([
      { file: "c.test.ts", line: 1, cited: "proxy/x.ts" },
    ]);
    expect(bareNamesIn("d.ts", " * the watch is kubernetes-pod-watch.ts's")).toHaveLength(1);
    expect(bareNamesIn("d.ts", "const t = frame.ts; // seen in link.ts")).toEqual([
      { file: "d.ts", line: 1, cited: "link.ts" },
    ]);
    expect(outsideDocumentsIn("b.ts", "// as DESIGN.md says; see shared/TESTBED.md")).toHaveLength(2);
  });
});
