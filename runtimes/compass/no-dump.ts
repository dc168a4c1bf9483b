/**
 * The agent's own environment holds the provider key and the adapter token; its bash tool runs
 * as the same uid, and a same-uid process may read `/proc/<pid>/environ` and `mem` of another —
 * unless that one is not "dumpable". prctl(PR_SET_DUMPABLE, 0) makes the agent's /proc files
 * root's and refuses ptrace, so `cat /proc/1/environ` from the bash tool fails. Children get a
 * fresh dumpable flag at exec, and bash's environment is scrubbed (tools.ts) anyway.
 */
import { dlopen, FFIType } from "bun:ffi";

const PR_SET_DUMPABLE = 4;

export function makeUndumpable(): void {
  const libc = dlopen("libc.so.6", {
    prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
  });
  const rc = libc.symbols.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  libc.close();
  if (rc !== 0) throw new Error("prctl(PR_SET_DUMPABLE, 0) failed");
}
