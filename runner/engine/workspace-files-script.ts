/**
 * The workspace files script (issue 18): one POSIX sh script that lists, reads, writes and deletes
 * under /workspace, run where the session volume is mounted and nothing else of the workload is:
 * the Kubernetes pod's `workspace` sidecar (runner/kubernetes/workspace-files.ts) and, for reads,
 * a short-lived container of the git image on Docker (runner/docker/workspace-files.ts). Its exit
 * statuses become the same coded errors on either engine (`filesError`).
 *
 * Resolving a path and then opening it are two steps an agent can race, swapping a directory for a
 * symlink between them (issue 34 item 17), so the reads check what they OPENED: `file` the kernel's
 * path of its open fd 3 (/proc/self/fd/3), `archive` and `list` the physical path of the directory
 * they entered (`pwd -P`; tar and find store a symlink below it as a link). What was opened cannot
 * be swapped afterwards. Writes and deletes still resolve, then act.
 */
import type { Readable } from "node:stream";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_ROOT } from "../../contracts/workspace-files.ts";
import { notFound, shownPath, tooLarge } from "./workspace-errors.ts";

/** Exit statuses of FILES_SCRIPT besides 0 and 1. */
export const EXIT = {
  outside: 10,
  missing: 11,
  isDir: 12,
  notDir: 13,
  tooLarge: 14,
  root: 15,
  short: 16,
} as const;

/**
 * One POSIX sh script for every operation: `sh -c SCRIPT sh OP PATH [N]`. PATH is relative to
 * `root` (/workspace; "" is the root itself; another root only in tests); N is a file's size limit (file) or an upload's size
 * (write). `list` prints five NUL-terminated fields per entry: type, size, mtime, name, link target.
 */
export function filesScript(root = WORKSPACE_ROOT): string {
  return `set -u
op=$1; rel=$2
inside() { case "$1" in "${root}"|"${root}"/*) ;; *) exit ${EXIT.outside} ;; esac; }
resolve() { r=$(realpath -m -- "${root}\${1:+/$1}") || exit 1; inside "$r"; }
case "$op" in
list)
  resolve "$rel"; [ -e "$r" ] || exit ${EXIT.missing}; [ -d "$r" ] || exit ${EXIT.notDir}
  cd "$r" || exit 1; inside "$(pwd -P)"
  exec find . -mindepth 1 -maxdepth 1 -printf '%y\\0%s\\0%T@\\0%P\\0%l\\0' ;;
file)
  resolve "$rel"; [ -e "$r" ] || exit ${EXIT.missing}
  exec 3< "$r" || exit 1
  inside "$(readlink -- /proc/self/fd/3)"; [ -d /proc/self/fd/3 ] && exit ${EXIT.isDir}
  size=$(stat -L -c %s -- /proc/self/fd/3) || exit 1
  [ "$size" -le "$3" ] || { echo "$size" >&2; exit ${EXIT.tooLarge}; }
  exec cat <&3 ;;
archive)
  resolve "$rel"; [ -e "$r" ] || exit ${EXIT.missing}
  cd "$(dirname -- "$r")" || exit 1
  b=$(basename -- "$r"); inside "$(pwd -P)/$b"
  exec tar -c -f - -- "$b" ;;
write)
  [ -n "$rel" ] || exit ${EXIT.root}
  resolve "$rel"; [ -d "$r" ] && exit ${EXIT.isDir}
  dir=$(dirname -- "$r")
  mkdir -p -- "$dir" 2>/dev/null && [ -d "$dir" ] || exit ${EXIT.notDir}
  tmp="$dir/.agent-sessions-upload.$$"
  head -c "$3" > "$tmp" || { rm -f -- "$tmp"; exit 1; }
  [ "$(stat -c %s -- "$tmp")" = "$3" ] || { rm -f -- "$tmp"; exit ${EXIT.short}; }
  exec mv -f -- "$tmp" "$r" ;;
delete)
  [ -n "$rel" ] || exit ${EXIT.root}
  parent=$(dirname -- "$rel"); [ "$parent" = . ] && parent=
  resolve "$parent"; [ -d "$r" ] || exit ${EXIT.missing}
  t="$r/$(basename -- "$rel")"
  [ -e "$t" ] || [ -L "$t" ] || exit ${EXIT.missing}
  exec rm -rf -- "$t" ;;
*) exit 2 ;;
esac`;
}

/** The files script's end as the files API's error; undefined when it succeeded. */
export function filesError(
  code: number | null | undefined,
  stderr: string,
  path: string,
  maxBytes?: number,
): CodedError | undefined {
  if (code === 0) return undefined;
  const shown = shownPath(path);
  switch (code) {
    case EXIT.outside:
      return new CodedError("INVALID_ARGUMENT", `${shown} leads out of ${WORKSPACE_ROOT} through a symlink`);
    case EXIT.missing:
      return notFound(path);
    case EXIT.isDir:
      return new CodedError(
        "INVALID_ARGUMENT",
        maxBytes !== undefined
          ? `${shown} is a directory; download it with :archive`
          : `${shown} is a directory`,
      );
    case EXIT.notDir:
      return new CodedError(
        "INVALID_ARGUMENT",
        maxBytes !== undefined ? `${shown} is not a directory` : `a parent of ${shown} is not a directory`,
      );
    case EXIT.tooLarge:
      return tooLarge(maxBytes ?? 0, Number(stderr.trim()) || undefined);
    case EXIT.root:
      return new CodedError(
        "INVALID_ARGUMENT",
        `cannot write or delete ${WORKSPACE_ROOT} itself; name a file`,
      );
    case EXIT.short:
      return new CodedError("INTERNAL", `the upload to ${shown} arrived short`);
    default:
      return new CodedError(
        "INTERNAL",
        `the workspace command failed on ${shown} (exit ${code ?? "unknown"}): ${stderr.slice(0, 300)}`,
      );
  }
}

/** A running files script: its stdout, its exit status, its stderr so far, and a way to end it. */
export type FilesRun = {
  stdout: Readable;
  exit: Promise<number | null | undefined>;
  stderr: () => string;
  close: () => unknown;
};

/**
 * A `file` or `archive` read of the script as the bytes it prints. The script checks before its
 * first byte, so that byte (or the end) is awaited to answer an error instead of an empty body.
 */
export async function checkedRead(
  run: FilesRun,
  path: string,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<AsyncIterable<Buffer>> {
  const check = async () => {
    // Ended by its deadline or a cancel: that is the answer, not the exit status it caused.
    signal?.throwIfAborted();
    const error = filesError(await run.exit, run.stderr(), path, maxBytes);
    if (error) throw error;
  };
  let first: Buffer | undefined;
  try {
    first = await firstChunk(run.stdout);
    if (first === undefined) await check();
  } catch (error) {
    run.close();
    throw error;
  }
  return (async function* () {
    try {
      if (first === undefined) return;
      yield first;
      for await (const chunk of run.stdout) yield chunk as Buffer;
      await check();
    } finally {
      // A reader that stops early (over the limit, gone) ends the command too.
      run.close();
    }
  })();
}

/** The stream's first chunk, or undefined when it ends without one. */
function firstChunk(stream: Readable): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const done = (chunk: Buffer | undefined) => {
      stream.off("readable", onReadable);
      stream.off("end", onEnd);
      stream.off("error", reject);
      resolve(chunk);
    };
    const onReadable = () => {
      const chunk = stream.read() as Buffer | null;
      if (chunk !== null) done(chunk);
    };
    const onEnd = () => done(undefined);
    stream.on("readable", onReadable);
    stream.once("end", onEnd);
    stream.once("error", reject);
  });
}
