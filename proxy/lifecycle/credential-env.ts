import { z } from "zod";

/**
 * The server's own settings: never offered to sessions, whatever the operator lists (they hold
 * the admin and runner tokens among others).
 */
export const SERVER_SETTINGS_PREFIX = "AGENT_SESSIONS_";

/** One entry of `AGENT_SESSIONS_CREDENTIAL_ENV`: a variable name, or a prefix ending in `*`. */
const Pattern = z
  .string()
  .regex(
    /^[A-Z_][A-Z0-9_]*\*?$/,
    "each entry is an environment variable name (A-Z, 0-9, _) or a prefix ending in *",
  )
  .refine(
    (p) =>
      !p.startsWith(SERVER_SETTINGS_PREFIX) &&
      !(p.endsWith("*") && SERVER_SETTINGS_PREFIX.startsWith(p.slice(0, -1))),
    { message: `the server's own ${SERVER_SETTINGS_PREFIX}* settings are never offered to sessions` },
  );

/**
 * `AGENT_SESSIONS_CREDENTIAL_ENV`: the server environment variables an Agent credential's
 * `secretRef.env` may name, comma-separated: exact names (`OPENAI_API_KEY`) and/or prefixes
 * (`PROVIDER_*`). Unset or empty: none (only literal credential values work).
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

/** Whether the allowlist offers the variable `name` to sessions. */
export function offersCredentialEnv(allowlist: readonly string[], name: string): boolean {
  if (name.startsWith(SERVER_SETTINGS_PREFIX)) return false;
  return allowlist.some((p) => (p.endsWith("*") ? name.startsWith(p.slice(0, -1)) : name === p));
}

/**
 * The environment offered to sessions as credential sources: exactly the variables the
 * allowlist names (a listed name that is unset is present with value `undefined`, so a
 * reference to it reads "not set" rather than "not offered"). What `resolveCredentials` reads.
 */
export function offeredCredentialEnv(
  allowlist: readonly string[],
  env: Record<string, string | undefined>,
): Record<string, string | undefined> {
  const offered: Record<string, string | undefined> = {};
  for (const p of allowlist)
    if (!p.endsWith("*") && offersCredentialEnv(allowlist, p)) offered[p] = undefined;
  for (const [name, value] of Object.entries(env))
    if (offersCredentialEnv(allowlist, name)) offered[name] = value;
  return Object.freeze(offered);
}
