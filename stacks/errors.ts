/**
 * Pulumi errors mapped in one place to the contracts' codes. Raw engine stderr never reaches a
 * client: messages here are ours, the engine text goes to the log only.
 */
import {
  ConcurrentUpdateError,
  StackAlreadyExistsError,
  StackNotFoundError,
} from "@pulumi/pulumi/automation/index.js";
import { CodedError, type ErrorCode } from "../contracts/errors.ts";

export class StackError extends CodedError {
  override name = "StackError";
  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(code, message, details);
  }
}

/** A mandatory policy failed: the operation changed nothing. */
export class PolicyViolationError extends StackError {
  override name = "PolicyViolationError";
  readonly policies: string[];
  constructor(stack: string, violations: { policy: string; message: string }[]) {
    const policies = [...new Set(violations.map((v) => v.policy))].sort();
    super("FAILED_PRECONDITION", `stack ${stack} violates policies: ${policies.join(", ")}`, {
      policies,
      violations,
    });
    this.policies = policies;
  }
}

export function isLockedError(error: unknown): boolean {
  return (
    error instanceof ConcurrentUpdateError ||
    /currently locked|locked by \d+ lock/i.test(String((error as Error)?.message))
  );
}

/** Maps an Automation API failure to a coded error; keeps the engine's text out of the message. */
export function toStackError(stack: string, op: string, error: unknown): StackError {
  if (error instanceof StackError) return error;
  if (error instanceof StackNotFoundError) return new StackError("NOT_FOUND", `stack ${stack} not found`);
  if (error instanceof StackAlreadyExistsError)
    return new StackError("ALREADY_EXISTS", `stack ${stack} already exists`);
  if (isLockedError(error)) return new StackError("ABORTED", `stack ${stack} is locked by another operation`);
  const text = String((error as Error)?.message ?? error);
  const pull = text.match(/ImagePullFailed: ([^\n]*)/);
  if (pull)
    return new StackError("FAILED_PRECONDITION", `image pull failed: ${pull[1]?.slice(0, 300)}`, {
      reason: "ImagePullFailed",
    });
  return new StackError("INTERNAL", `${op} of stack ${stack} failed`, { reason: "StackOperationFailed" });
}

/**
 * A failed command's text fit for a log: every known secret value (also JSON-escaped) replaced,
 * the command line cut to its subcommand, and `KEY=VALUE` config arguments blanked — so a
 * credential can reach a log neither from an argument nor from an echo in stderr.
 */
export function redactCommandText(text: string, secrets: readonly string[] = []): string {
  let out = text;
  const values = secrets.flatMap((s) => [s, JSON.stringify(s).slice(1, -1)]).filter((s) => s.length >= 4);
  for (const value of [...new Set(values)].sort((a, b) => b.length - a.length))
    out = out.split(value).join("[REDACTED]");
  // execa: "Command failed with exit code N: /path/pulumi config set-all --secret k=v …"
  out = out.replace(
    /(Command failed with exit code -?\d+: )(\S+)((?: [a-z][a-z-]*){0,2})[^\n]*/g,
    (_m, head: string, binary: string, sub: string) =>
      `${head}${binary.split("/").pop()}${sub} [arguments not logged]`,
  );
  return out.replace(/((?:--secret|--plaintext|--path)\s+[^\s=]+=)\S+/g, "$1[REDACTED]");
}
