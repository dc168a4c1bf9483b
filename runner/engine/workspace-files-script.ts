/**
 * The workspace files script (issue 18): one POSIX sh script that lists, reads, writes and deletes
 * under /workspace: in the Kubernetes pod's `workspace` sidecar (runner/kubernetes/workspace-files.ts),
 * and on Docker (runner/docker/workspace-files.ts) for reads in a short-lived container of the git
 * image that mounts the session volume only, for writes and deletes by exec in the workload
 * container as its user. Its exit statuses become the same coded errors on either engine (`filesError`).
 *
 * Resolving a path and then opening it are two steps an agent can race, swapping a directory for a
 * symlink between them (issue 34 item 17), so the reads check what they OPENED: `file` the kernel's
 * path of its open fd 3 (/proc/self/fd/3), `archive` and `list` the physical path of the directory
 * they entered (`pwd -P`; tar and find store a symlink below it as a link). What was opened cannot
 * be swapped afterwards. Writes and deletes follow no symlink at all: they enter the parent
 * directory one component at a time, each checked to be what was entered (\`walk\`), and act
 * relative to it (a new file by \`mktemp\` + \`mv -T\`, a removal by \`rm\` of the entry itself), so a
 * symlink anywhere in the path is refused (EXIT.symlink) and a swap during the act finds the
 * directory already pinned. Busybox (the reference image) and coreutils (Debian) both do all this.
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
  symlink: 17,
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
# The kernel's path of the working directory now (dash's \`pwd -P\` answers what it saw at \`cd\`).
cwd() { readlink /proc/self/cwd; }
split() { case "$1" in */*) parent=\${1%/*}; name=\${1##*/} ;; *) parent=; name=$1 ;; esac; }
# Enters the directory PATH names under the root one component at a time, creating a missing one
# with \`create\`, and refuses any component that is a symlink: each \`cd\` is checked against the
# physical directory it entered (the kernel's, \`cwd\`), so a link swapped in after the \`[ -L ]\` test is caught
# too. The shell's working directory then pins that directory: a later swap cannot move it.
walk() {
  cd -P -- "${root}" || exit 1
  here=$(cwd); rest=$1
  while [ -n "$rest" ]; do
    seg=\${rest%%/*}
    case "$rest" in */*) rest=\${rest#*/} ;; *) rest= ;; esac
    [ -L "$seg" ] && exit ${EXIT.symlink}
    if [ ! -e "$seg" ]; then
      [ "\${2:-}" = create ] || exit ${EXIT.missing}
      mkdir -- "$seg" 2>/dev/null
    fi
    if [ ! -d "$seg" ]; then [ "\${2:-}" = create ] && exit ${EXIT.notDir}; exit ${EXIT.missing}; fi
    # Gone (or swapped) since the test: what is there now decides, never exit 1 (a 500).
    cd -P -- "./$seg" 2>/dev/null || { [ -L "$seg" ] && exit ${EXIT.symlink}; exit ${EXIT.missing}; }
    here=\${here%/}/$seg
    [ "$(cwd)" = "$here" ] || exit ${EXIT.symlink}
  done
}
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
  b=$(basename -- "$r"); p=$(pwd -P); inside "\${p%/}/$b"
  exec tar -c -f - -- "$b" ;;
write)
  [ -n "$rel" ] || exit ${EXIT.root}
  split "$rel"; walk "$parent" create
  [ -L "$name" ] && exit ${EXIT.symlink}
  [ -d "$name" ] && exit ${EXIT.isDir}
  tmp=$(mktemp .agent-sessions-upload.XXXXXX) || exit 1
  { [ -f "$tmp" ] && [ ! -L "$tmp" ]; } || { rm -f -- "$tmp"; exit ${EXIT.symlink}; }
  # Opened read-only, so neither created nor truncated through a link swapped in for it since;
  # what was opened must be the file mktemp made here (checked before a byte is written), and
  # the bytes go to that very file: /proc/self/fd/4 reopens what fd 4 holds, not a path.
  exec 4< "$tmp"
  { [ "$(readlink /proc/self/fd/4)" = "$(cwd)/$tmp" ] && [ -f /proc/self/fd/4 ]; } ||
    { rm -f -- "$tmp"; exit ${EXIT.symlink}; }
  chmod 644 /proc/self/fd/4
  head -c "$3" > /proc/self/fd/4 || { rm -f -- "$tmp"; exit 1; }
  [ "$(stat -L -c %s /proc/self/fd/4)" = "$3" ] || { rm -f -- "$tmp"; exit ${EXIT.short}; }
  # -T: rename(2) onto NAME itself (a file or a link is replaced, a directory refused), never
  # into the directory NAME might have become since.
  exec mv -f -T -- "$tmp" "$name" ;;
delete)
  [ -n "$rel" ] || exit ${EXIT.root}
  split "$rel"; walk "$parent"
  [ -e "$name" ] || [ -L "$name" ] || exit ${EXIT.missing}
  # The entry itself (a link is removed, not followed), relative to the directory entered.
  exec rm -rf -- "./$name" ;;
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
    case EXIT.symlink:
      return new CodedError(
        "INVALID_ARGUMENT",
        `${shown} goes through a symlink; writes and deletes follow none (one could lead out of ${WORKSPACE_ROOT})`,
      );
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
