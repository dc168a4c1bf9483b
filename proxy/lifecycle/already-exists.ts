import { CodedError } from "../../contracts/errors.ts";

/** The answer to a create-only PUT of a name in use: 409, and what to do instead. */
export function alreadyExists(kind: string, namespace: string, name: string): CodedError {
  return new CodedError(
    "ALREADY_EXISTS",
    `${kind} ${namespace}/${name} already exists; choose another name, or replace it with a PUT without If-None-Match (apply)`,
    { kind, namespace, name },
  );
}
