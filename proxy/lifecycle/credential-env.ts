import { z } from "zod";

/**
 * The server's own settings: never offered to sessions, whatever the operator lists (they hold
 * the admin and runner tokens among others).
 */
export const SERVER_SETTINGS_PREFIX = "AGENT_SESSIONS_";

/**
 * One entry of `AGENT_SESSIONS_CREDENTIAL_ENV`: a variable name, or a prefix ending in `*`,
 * offered to every namespace; or `<namespace>/<name or prefix>`, offered to that namespace only.
 */
const Pattern = z
  .string()
  .regex(
    /^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\/)?[A-Z_][A-Z0-9_]*\*?$/,
    "each entry is an environment variable name (A-Z, 0-9, _) or a prefix ending in *, optionally after `<namespace>/`",
  )
  .refine(
    (entry) => {
      const p = variablePart(entry);
      return (
        !p.startsWith(SERVER_SETTINGS_PREFIX) &&
        !(p.endsWith("*") && SERVER_SETTINGS_PREFIX.startsWith(p.slice(0, -1)))
      );
    },
    { message: `the server's own ${SERVER_SETTINGS_PREFIX}* settings are never offered to sessions` },
  );

/** `team-a/KEY` → `KEY`; `KEY` → `KEY`. */
function variablePart(entry: string): string {
  return entry.slice(entry.indexOf("/") + 1);
}

/** `team-a/KEY` → `team-a`; `KEY` → undefined (every namespace). */
function namespacePart(entry: string): string | undefined {
  const slash = entry.indexOf("/");
  return slash < 0 ? undefined : entry.slice(0, slash);
}

/**
 * `AGENT_SESSIONS_CREDENTIAL_ENV`: the server environment variables an Agent credential's
 * `secretRef.env` may name, comma-separated: exact names (`OPENAI_API_KEY`) and/or prefixes
 * (`PROVIDER_*`), offered to Agents of every namespace, and `<namespace>/<name or prefix>`
 * (`team-a/TEAM_A_*`), offered to that namespace's Agents only. Unset or empty: none (only
 * literal credential values work).
 */
export const CredentialEnvAllowlist = z
  .string()
  .transform((text) =>
    text
      .split(",")
      .map((p) => p.trim())
      .filter((p) => p !== ""),
  )
  .pipe(z.array(Pattern));

/**
 * Whether the allowlist offers the variable `name` to sessions: of `namespace`, or (namespace
 * undefined) of every namespace.
 */
export function offersCredentialEnv(allowlist: readonly string[], name: string, namespace?: string): boolean {
  if (name.startsWith(SERVER_SETTINGS_PREFIX)) return false;
  return allowlist.some((entry) => {
    const scope = namespacePart(entry);
    if (scope !== undefined && scope !== namespace) return false;
    const p = variablePart(entry);
    return p.endsWith("*") ? name.startsWith(p.slice(0, -1)) : name === p;
  });
}

/** The key of `variable` in an offered environment when it is offered to `namespace` only. */
export function namespacedOfferKey(namespace: string, variable: string): string {
  return `${namespace}/${variable}`;
}

/**
 * The environment offered to sessions as credential sources: exactly the variables the
 * allowlist names (a listed name that is unset is present with value `undefined`, so a
 * reference to it reads "not set" rather than "not offered"). A variable offered to every
 * namespace is keyed by its name; one offered to a namespace only by `<namespace>/<name>`
 * (namespacedOfferKey). What `resolveCredentials` reads.
 */
export function offeredCredentialEnv(
  allowlist: readonly string[],
  env: Record<string, string | undefined>,
): Record<string, string | undefined> {
  const offered: Record<string, string | undefined> = {};
  const namespaces = new Set(allowlist.map(namespacePart));
  for (const entry of allowlist) {
    const p = variablePart(entry);
    const scope = namespacePart(entry);
    if (!p.endsWith("*") && offersCredentialEnv(allowlist, p, scope))
      offered[scope === undefined ? p : namespacedOfferKey(scope, p)] = undefined;
  }
  for (const [name, value] of Object.entries(env))
    for (const scope of namespaces) {
      if (
        scope === undefined
          ? !offersCredentialEnv(allowlist, name)
          : !offersCredentialEnv(allowlist, name, scope)
      )
        continue;
      // Offered to every namespace already: no namespaced copy needed.
      if (scope !== undefined && offersCredentialEnv(allowlist, name)) continue;
      offered[scope === undefined ? name : namespacedOfferKey(scope, name)] = value;
    }
  return Object.freeze(offered);
}
