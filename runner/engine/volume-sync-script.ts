/**
 * A volume made equal to a snapshot's (a restore in place, a fork's seed: issue 38), the same on
 * every engine: runner/docker/snapshots.ts runs it in its copy container, runner/kubernetes/
 * snapshots.ts in its copy pod, both of the runner's git image (sh, GNU find, sort, comm, sed,
 * cksum, tar), as uid 65532.
 *
 * Emptying the volume and copying every file back costs most in the emptying: on a file system
 * mounted with `discard` (the test bed's ext4), unlinking 50 MB in 500 files that reached the disk
 * took 0.5-0.9 s, against 0.2 s for the copy. Most of a restored volume is most often what the
 * snapshot holds already, so only what differs goes and comes: a file is kept when its size,
 * modification time (to the nanosecond), mode, owner and CRC (`cksum`) are the snapshot's; every
 * other entry of the volume is removed (directories the snapshot does not hold as directories,
 * with what they hold), and the snapshot's other entries are copied in by a tar pipe (pax format:
 * times to the nanosecond; directories get their modes and times after their contents). The
 * volume's root is never touched (on Kubernetes it is the provisioner's).
 *
 * Then both trees are listed again (type, size, time, mode, link target and path of every entry;
 * a directory's size aside, which keeps what it once held)
 * and must be the same: anything the sync missed or could not do (a tool missing in another git
 * image, a full scratch directory, an unreadable directory) exits non-zero, and the caller empties
 * the volume and copies all of it instead (`REPLACE_FALLBACK`).
 *
 * Arguments: the snapshot's directory, the volume's, a writable scratch directory. Names may hold
 * any byte but NUL (every list is NUL-separated).
 */
export const VOLUME_SYNC_SCRIPT = `set -eu
export LC_ALL=C
S=$1 W=$2 T=$3
files() { ( cd "$1" && find . -mindepth 1 -type f -printf '%s %T@ %m %U:%G %p\\0' ) | sort -z; }
crcs() { ( cd "$1" && xargs -0r cksum -a crc -z -- ) | sort -z; }
entries() {
  ( cd "$1" && find . -mindepth 1 \\( -type d -printf 'd %T@ %m|%p\\0' \\) -o -printf '%y %s %T@ %m %l|%p\\0' ) | sort -z
}
files "$S" >"$T/s.files"
files "$W" >"$T/w.files"
comm -z -12 "$T/s.files" "$T/w.files" | sed -z 's/^[^ ]* [^ ]* [^ ]* [^ ]* //' >"$T/alike"
crcs "$S" <"$T/alike" >"$T/s.crcs" &
crcs "$W" <"$T/alike" >"$T/w.crcs"
wait $!
comm -z -12 "$T/s.crcs" "$T/w.crcs" | sed -z 's/^[0-9]* [0-9]* //' | sort -z >"$T/kept"
find "$W" -mindepth 1 -type d ! -perm -u=w -exec chmod u+w {} +
( cd "$W" && find . -mindepth 1 ! -type d -print0 ) | sort -z | comm -z -23 - "$T/kept" >"$T/gone"
( cd "$W" && xargs -0r rm -f -- <"$T/gone" )
( cd "$S" && find . -mindepth 1 -type d -print0 ) | sort -z >"$T/s.dirs"
( cd "$W" && find . -mindepth 1 -type d -print0 ) | sort -z | comm -z -23 - "$T/s.dirs" >"$T/gone"
( cd "$W" && xargs -0r rm -rf -- <"$T/gone" )
( cd "$S" && find . -mindepth 1 -print0 ) | sort -z | comm -z -23 - "$T/kept" >"$T/copied"
tar -C "$S" --format=posix --null --no-recursion -T "$T/copied" -cf - | tar -C "$W" -xpf - --no-same-owner
entries "$S" >"$T/s.entries"
entries "$W" >"$T/w.entries"
[ -z "$(comm -z -3 "$T/s.entries" "$T/w.entries" | tr -d '\\0' | head -c 1)" ]`;

/**
 * The volume at `$2` emptied and all of `$1` copied in: what a failed sync falls back to (the
 * volume's root kept). A directory left unwritable by its owner is made writable first.
 */
export const REPLACE_FALLBACK = `( cd "$2" && find . -mindepth 1 -type d ! -perm -u=w -exec chmod u+w {} + ) &&
( cd "$2" && find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + ) &&
( cd "$1" && find . -mindepth 1 -maxdepth 1 -exec cp -a -t "$2" -- {} + )`;

/** What `replace` says on stderr when the sync failed and the full replace ran (the runner logs it). */
export const SYNC_FELL_BACK = "volume sync failed: emptied and copied whole";

/**
 * A shell function `replace FROM TO SCRATCH` for a copy script: TO made to hold what FROM holds by
 * the sync, run as a script of its own (`$VOLUME_SYNC`, which the caller's script sets from
 * VOLUME_SYNC_SCRIPT passed as an argument, so the sync's `set -e` holds), else by the fallback.
 */
export const REPLACE_FUNCTION = `replace() {
  if ! sh -c "$VOLUME_SYNC" sync "$1" "$2" "$3" 2>/dev/null; then
    echo "${SYNC_FELL_BACK}" >&2
    set -- "$1" "$2"
    ${REPLACE_FALLBACK.replaceAll("\n", "\n    ")}
  fi
}`;
