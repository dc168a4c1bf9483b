import { CodedError } from "../../contracts/errors.ts";
import type { Store } from "../store/store.ts";

type WrittenCredential = { name: string; value?: string | undefined; valueSet?: true | undefined };
type WithCredentials = {
  metadata: { namespace: string; name: string };
  spec: { credentials: readonly WrittenCredential[] };
};

/**
 * An object with write-only credentials (an Agent, an MCPServer) as written, each `valueSet: true`
 * credential given the value stored under its name, so a GET-then-PUT round trip keeps the secret
 * it never saw. One with no stored value is INVALID_ARGUMENT naming it: valueSet cannot invent a
 * secret. The contracts allow exactly one of value, secretRef and valueSet on a credential.
 */
export async function keptCredentials<T>(
  store: Store,
  kind: "Agent" | "MCPServer",
  written: WithCredentials,
): Promise<T> {
  if (!written.spec.credentials.some((c) => c.valueSet)) return written as T;
  const { namespace, name } = written.metadata;
  const stored = (await store.getResource(kind, namespace, name)) as WithCredentials | undefined;
  const credentials = written.spec.credentials.map((credential, index) => {
    const { valueSet, ...rest } = credential;
    if (!valueSet) return rest;
    const value = stored?.spec.credentials.find((c) => c.name === credential.name)?.value;
    if (value === undefined)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${kind}: credential ${credential.name} says valueSet: true, but ${kind} ${namespace}/${name} has no value stored under that name; send its value or a secretRef`,
        {
          field_violations: [
            { field: `spec.credentials.${index}.valueSet`, description: "no value stored under this name" },
          ],
        },
      );
    return { ...rest, value };
  });
  return { ...written, spec: { ...written.spec, credentials } } as T;
}
