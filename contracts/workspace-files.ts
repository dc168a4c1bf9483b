import { z } from "zod";
import { CodedError } from "./errors.ts";

/**
 * The files API of a workspace (issue 18): list, download, upload, delete and archive under
 * `/workspace`, through the proxy and the runner (never an exec by a client). Every path a client
 * names is confined here first; the runner checks symlinks on the engine side.
 */

/** Where the session volume is mounted in every workload. */
export const WORKSPACE_ROOT = "/workspace";

/** Raw bytes per runner-link message of a download or upload (base64 makes it ~1.4 MiB, far below the frame limit). */
export const WORKSPACE_CHUNK_BYTES = 1024 * 1024;

/** @default of the largest upload, download or archive: 64 MiB (AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES). */
export const DEFAULT_WORKSPACE_FILE_MAX_BYTES = 64 * 1024 * 1024;

/** Longest path accepted (bytes of its text). */
const PATH_MAX_CHARS = 4096;

/**
 * Longest segment accepted, in UTF-8 bytes: a file system's NAME_MAX (ext4, overlayfs, xfs).
 * A longer one fails in the engine (ENAMETOOLONG), which reached a client as a 500.
 */
export const PATH_SEGMENT_MAX_BYTES = 255;

/**
 * A path relative to /workspace, normalized: segments joined by `/`, no `.`/`..`/empty segment;
 * `""` is /workspace itself. Accepts `a/b`, `/workspace/a/b`, `./a//b/`; rejects `..` anywhere,
 * any other absolute path, NUL, backslashes and a segment over PATH_SEGMENT_MAX_BYTES
 * (INVALID_ARGUMENT, nothing touched).
 */
export function confineWorkspacePath(raw: string): string {
  const fail = (why: string) =>
    new CodedError("INVALID_ARGUMENT", `path ${JSON.stringify(raw.slice(0, 200))} ${why}`, {
      path: raw.slice(0, 200),
    });
  if (raw.length > PATH_MAX_CHARS) throw fail(`is longer than ${PATH_MAX_CHARS} characters`);
  if (raw.includes("\0")) throw fail("contains a NUL byte");
  if (raw.includes("\\")) throw fail("contains a backslash");
  let rest = raw;
  if (rest.startsWith("/")) {
    if (rest !== WORKSPACE_ROOT && !rest.startsWith(`${WORKSPACE_ROOT}/`))
      throw fail(`is outside ${WORKSPACE_ROOT}`);
    rest = rest.slice(WORKSPACE_ROOT.length);
  }
  const segments = rest.split("/").filter((s) => s !== "" && s !== ".");
  if (segments.includes("..")) throw fail(`leaves ${WORKSPACE_ROOT} (contains "..")`);
  const utf8 = new TextEncoder();
  for (const s of segments) {
    const bytes = utf8.encode(s).length;
    if (bytes > PATH_SEGMENT_MAX_BYTES)
      throw fail(
        `has a segment longer than ${PATH_SEGMENT_MAX_BYTES} bytes (${bytes}: ${JSON.stringify(s.slice(0, 40))}…)`,
      );
  }
  return segments.join("/");
}

/** The absolute path in the workload of a confined relative path. */
export function absoluteWorkspacePath(relative: string): string {
  return relative === "" ? WORKSPACE_ROOT : `${WORKSPACE_ROOT}/${relative}`;
}

/** True when an absolute path (a symlink's target, resolved) stays inside /workspace. */
export function isInsideWorkspace(absolute: string): boolean {
  const normalized: string[] = [];
  for (const s of absolute.split("/")) {
    if (s === "" || s === ".") continue;
    if (s === "..") normalized.pop();
    else normalized.push(s);
  }
  const p = `/${normalized.join("/")}`;
  return p === WORKSPACE_ROOT || p.startsWith(`${WORKSPACE_ROOT}/`);
}

export const WorkspaceEntryType = z.enum(["file", "dir", "symlink", "other"]);
export type WorkspaceEntryType = z.infer<typeof WorkspaceEntryType>;

/** One entry of a directory listing (`GET …/workspace/files?path=DIR`). */
export const WorkspaceEntry = z.object({
  name: z.string().min(1),
  type: WorkspaceEntryType,
  /** Bytes (0 for directories). */
  size: z.number().int().nonnegative(),
  /** Last modification, RFC 3339. */
  mtime: z.string(),
  /** A symlink's target as stored (never followed by the listing). */
  link_target: z.string().optional(),
});
export type WorkspaceEntry = z.infer<typeof WorkspaceEntry>;

export const WorkspaceListing = z.object({
  /** The listed directory, relative to /workspace ("" is /workspace). */
  path: z.string(),
  entries: z.array(WorkspaceEntry),
});
export type WorkspaceListing = z.infer<typeof WorkspaceListing>;

/** The result of an upload or delete. */
export const WorkspaceWriteResult = z.object({ path: z.string(), size: z.number().int().nonnegative() });
export type WorkspaceWriteResult = z.infer<typeof WorkspaceWriteResult>;
export const WorkspaceDeleteResult = z.object({ path: z.string(), deleted: z.boolean() });
export type WorkspaceDeleteResult = z.infer<typeof WorkspaceDeleteResult>;
