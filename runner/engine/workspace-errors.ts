/**
 * The files API's errors that both engines give alike (runner/docker/workspace-files.ts,
 * runner/kubernetes/workspace-files.ts): a client sees the same code and text whatever the engine.
 */
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_ROOT } from "../../contracts/workspace-files.ts";

/** A confined workspace path as a user knows it ("" is /workspace itself). */
export function shownPath(path: string): string {
  return `${WORKSPACE_ROOT}${path === "" ? "" : `/${path}`}`;
}

export function notFound(path: string): CodedError {
  return new CodedError("NOT_FOUND", `${shownPath(path)} does not exist`);
}

/** A file over the download limit; `size` when the engine told it. */
export function tooLarge(maxBytes: number, size?: number): CodedError {
  return new CodedError(
    "RESOURCE_EXHAUSTED",
    `${size !== undefined ? `${size} bytes exceed` : "more than"} the limit of ${maxBytes} bytes`,
    { limit_bytes: maxBytes },
  );
}
