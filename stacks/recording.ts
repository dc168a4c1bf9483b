/**
 * A stack whose recording is pending: the runner's fast path (runner/engine/fast-path.ts) changed the engine
 * at once and the `up` that records the change in the stack is still to finish. While it is, a
 * marker file (holding the runner's PID) sits beside the stack's settings; a process outside the
 * runner that must see the stack settled (`agent-sessions policy check --expect-no-changes`) waits
 * for it to go. A marker of a process that is gone counts as settled: nothing will finish it (the
 * next operation of a new runner takes the full path and reconciles).
 *
 * Marks are counted per stack in this process: operations back to back each mark before they act,
 * and the file goes only when the last of them is recorded (or given up).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { SETTINGS_DIR } from "./stack-settings.ts";
import { alive } from "./stale-lock.ts";

export function recordingMarker(dataDir: string, stackName: string): string {
  return join(dataDir, SETTINGS_DIR, `${stackName}.recording`);
}

/** How many marks of this process each marker file stands for. */
const holders = new Map<string, number>();

/**
 * Marks the stack's recording pending; the returned function clears this mark (once; again is a
 * no-op). The file stays while another mark of the stack is held.
 */
export function markRecording(dataDir: string, stackName: string): () => void {
  const file = recordingMarker(dataDir, stackName);
  const held = holders.get(file) ?? 0;
  if (held === 0) {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, String(process.pid), { mode: 0o600 });
  }
  holders.set(file, held + 1);
  let cleared = false;
  return () => {
    if (cleared) return;
    cleared = true;
    const left = (holders.get(file) ?? 1) - 1;
    if (left > 0) {
      holders.set(file, left);
      return;
    }
    holders.delete(file);
    rmSync(file, { force: true });
  };
}

/** True when no live process has the stack's recording pending. */
export function recorded(dataDir: string, stackName: string): boolean {
  const file = recordingMarker(dataDir, stackName);
  if (!existsSync(file)) return true;
  const pid = Number(readFileSync(file, "utf8").trim());
  return !(Number.isInteger(pid) && pid > 0 && alive(pid));
}

/** Waits until the stack is recorded; false when it still is not after `timeoutMs`. */
export async function waitRecorded(dataDir: string, stackName: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!recorded(dataDir, stackName)) {
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

/** The stacks under `dataDir` whose recording a live process still has pending. */
export function pendingRecordings(dataDir: string): string[] {
  const dir = join(dataDir, SETTINGS_DIR);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".recording"))
    .map((f) => f.slice(0, -".recording".length))
    .filter((stackName) => !recorded(dataDir, stackName));
}

/**
 * The stacks under `dataDir` whose recording was left pending by a process that is gone (a runner
 * killed or restarted while it recorded): the engine may hold a state the stack does not record.
 */
export function interruptedRecordings(dataDir: string): string[] {
  const dir = join(dataDir, SETTINGS_DIR);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".recording"))
    .map((f) => f.slice(0, -".recording".length))
    .filter((stackName) => existsSync(recordingMarker(dataDir, stackName)) && recorded(dataDir, stackName));
}
