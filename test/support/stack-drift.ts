/**
 * The stack is the declaration of record: a refreshed `pulumi preview` of it (`agent-sessions
 * policy check --expect-no-changes --refresh`) proposes nothing. Callers first wait for the
 * driver's last operation to settle (its background recording).
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { expect } from "vitest";
import { repoRoot } from "./testbed.ts";

export async function expectNoStackDrift(stack: string, dataDir: string, after: string): Promise<void> {
  const child = spawn(
    join(repoRoot, "bin", "agent-sessions"),
    ["policy", "check", "-s", stack, "--expect-no-changes", "--refresh", "--data-dir", dataDir],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const code = await new Promise<number | null>((r) => child.once("close", r));
  expect(out, `after ${after}`).toContain(`${stack}: no policy violations, no changes (refreshed)`);
  expect(code).toBe(0);
}
