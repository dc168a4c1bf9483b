/**
 * What a file backend (`file://DIR`, the default) answers without running the CLI. The Automation
 * API spends one CLI process on `stack select` before every operation and three after every `up`
 * (`stack output` twice, masked and with secrets, and `stack history` for a summary nobody here
 * reads); each is a Go process start plus, with secrets, the passphrase's key derivation. With
 * the stack's own checkpoint file at hand they are not needed:
 * - the stack exists when its checkpoint exists (`stack init` writes it, `stack rm` leaves only
 *   its `.bak`), so `select` has nothing to do (every later command names `--stack`);
 * - the outputs are the root Stack resource's outputs in the checkpoint the `up` just wrote.
 * Anything unexpected (a gzipped or unknown checkpoint, a secret output, no root resource) is no
 * answer, and the caller asks the CLI as before.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { LocalWorkspace, OutputMap, Stack } from "@pulumi/pulumi/automation/index.js";
import { z } from "zod";

/** The checkpoint file of `stack` of `project` in the backend directory, without its extension. */
function stackFileStem(backendDir: string, project: string, stack: string): string {
  return join(backendDir, ".pulumi", "stacks", project, stack);
}

/** Whether `stack` exists in the file backend. */
export function stackExists(backendDir: string, project: string, stack: string): boolean {
  const stem = stackFileStem(backendDir, project, stack);
  return existsSync(`${stem}.json`) || existsSync(`${stem}.json.gz`);
}

/** Pulumi's marker of a secret value in state (`4dabf18193072939515e22adb298388d`). */
const SECRET_SIG = "4dabf18193072939515e22adb298388d";

const Checkpoint = z.object({
  version: z.literal(3),
  checkpoint: z.object({
    latest: z
      .object({
        resources: z
          .array(z.object({ type: z.string(), outputs: z.record(z.string(), z.unknown()).optional() }))
          .optional(),
      })
      .nullish(),
  }),
});

/** The stack's outputs from its checkpoint; undefined when the file cannot answer for sure. */
export function checkpointOutputs(backendDir: string, project: string, stack: string): OutputMap | undefined {
  let text: string;
  try {
    text = readFileSync(`${stackFileStem(backendDir, project, stack)}.json`, "utf8");
  } catch {
    return undefined;
  }
  let parsed: z.infer<typeof Checkpoint>;
  try {
    parsed = Checkpoint.parse(JSON.parse(text));
  } catch {
    return undefined;
  }
  const root = parsed.checkpoint.latest?.resources?.find((r) => r.type === "pulumi:pulumi:Stack");
  // Other resources' secret inputs (credentials) are in the file, encrypted: only the outputs count.
  if (!root || JSON.stringify(root.outputs ?? {}).includes(SECRET_SIG)) return undefined;
  return Object.fromEntries(
    Object.entries(root.outputs ?? {}).map(([key, value]) => [key, { value, secret: false }]),
  );
}

/**
 * Make `ws` answer `selectStack` and `stackOutputs` from the file backend when it can, and the
 * CLI otherwise: a stack not in the backend still goes to `stack select` (for the CLI's own
 * not-found error).
 */
export function answerFromFileBackend(
  ws: LocalWorkspace,
  backendDir: string,
  project: string,
): LocalWorkspace {
  const viaCli = { select: ws.selectStack.bind(ws), outputs: ws.stackOutputs.bind(ws) };
  ws.selectStack = async (stack: string) => {
    if (!stackExists(backendDir, project, stack)) await viaCli.select(stack);
  };
  ws.stackOutputs = async (stack: string) =>
    checkpointOutputs(backendDir, project, stack) ?? viaCli.outputs(stack);
  return ws;
}

/**
 * A stack whose operations skip the `stack history` call that only fills the result's `summary`
 * (this library never reads it; `UpResult.summary` is then undefined).
 */
export function withoutSummary(stack: Stack): Stack {
  stack.info = async () => undefined;
  return stack;
}
