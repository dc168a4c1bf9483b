/**
 * Why a runner could not start, said in terms a new user can act on (issue 34 item 2): the
 * dependency it lacks and how to get it, instead of the raw line of a failed spawn or connect
 * (`code: -2 … spawn pulumi ENOENT`, `connect ENOENT /var/run/docker.sock`).
 */
import { CodedError } from "../../contracts/errors.ts";

/** The fields of a Node system error (a failed spawn or connect). */
type SystemError = {
  code?: unknown;
  syscall?: unknown;
  path?: unknown;
  address?: unknown;
  message?: unknown;
};

/** Codes a connect to the engine's socket or port fails with when nothing serves there. */
const UNREACHABLE = new Set(["ENOENT", "ECONNREFUSED", "EACCES", "EHOSTUNREACH", "ETIMEDOUT", "ENOTFOUND"]);

/**
 * The error a runner's start failed with, explained when it is a missing dependency
 * (FAILED_PRECONDITION naming it); any other error unchanged.
 */
export function explainStartFailure(
  error: unknown,
  config: { engine: "docker" | "kubernetes"; dockerHost: string },
): unknown {
  const e = (error ?? {}) as SystemError & { commandResult?: { err?: SystemError } };
  // The Automation API's CommandError keeps the spawn's error in `commandResult.err`.
  const spawned = e.commandResult?.err ?? e;
  const text = `${String(spawned.message ?? "")} ${String(e.message ?? "")}`;
  if (spawned.code === "ENOENT" && /\bspawn\b[^\n]*\bpulumi\b/.test(text))
    return new CodedError(
      "FAILED_PRECONDITION",
      "the runner cannot start: the Pulumi CLI was not found (`pulumi` on PATH, or $PULUMI_HOME/bin/pulumi " +
        "when PULUMI_HOME is set); install it (https://www.pulumi.com/docs/install/, or `scripts/testbed up " +
        "pulumi` in this repository) and start again",
    );
  if (
    config.engine === "docker" &&
    e.syscall === "connect" &&
    typeof e.code === "string" &&
    UNREACHABLE.has(e.code)
  )
    return new CodedError(
      "FAILED_PRECONDITION",
      `the runner cannot start: cannot reach the Docker engine at ${config.dockerHost} (${e.code}); start ` +
        "Docker, or set DOCKER_HOST to where it listens (e.g. unix:///run/user/1000/docker.sock for " +
        'rootless Docker, or `eval "$(scripts/testbed env)"` for this repository\'s test bed), or run with ' +
        "--engine kubernetes",
    );
  return error;
}
