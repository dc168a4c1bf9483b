/**
 * The adapter token out of every environment the agent's tools can read (issue 35). The engine
 * gives the adapter its token in the workload's environment, and a process of the same uid may
 * read another's `/proc/<pid>/environ`, which is the environment the process was EXECUTED with:
 * deleting the variable later changes nothing there. So the adapter executes itself once more
 * (`process.execve`: same PID, a new image) with an environment without the token, handing the
 * token over in a file on the workload's private /tmp that the new image reads and removes at
 * once, long before the runner starts any agent. The agent wrapper unsets it too
 * (runner/engine/agent-exec.ts): an exec'd agent starts with the workload's environment.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const HANDOVER = "ADAPTER_HANDOVER_FILE";

/**
 * Call first in an adapter's main module. Returns only in the image that no longer has the token
 * in its executed environment (or where no re-exec is possible: an engine without the variable,
 * a Node without `process.execve`); `process.env.ADAPTER_TOKEN` holds the token in memory then.
 */
export function adapterTokenOutOfEnvironment(env: NodeJS.ProcessEnv = process.env): void {
  const handedOver = env[HANDOVER];
  if (handedOver) {
    delete env[HANDOVER];
    env.ADAPTER_TOKEN = readFileSync(handedOver, "utf8");
    rmSync(handedOver, { force: true });
    return;
  }
  const token = env.ADAPTER_TOKEN;
  if (!token || typeof process.execve !== "function") return;
  const file = join(tmpdir(), `.adapter-token-${randomBytes(8).toString("hex")}`);
  try {
    writeFileSync(file, token, { mode: 0o600, flag: "wx" });
  } catch (error) {
    // No private /tmp to hand over through: keep the token where it is rather than not start.
    process.stderr.write(`adapter: the token stays in the environment (${String(error)})\n`);
    return;
  }
  const next: Record<string, string> = {};
  for (const [name, value] of Object.entries(env))
    if (value !== undefined && name !== "ADAPTER_TOKEN") next[name] = value;
  next[HANDOVER] = file;
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...process.argv.slice(1)], next);
}
