/**
 * Defence in depth for what leaves the adapter: a secret the session holds (its provider key,
 * its adapter token) is replaced wherever it appears in an answer, a delta or an error — e.g. a
 * model that echoes what a tool printed. Secrets shorter than 8 characters are not looked for
 * (they would match ordinary text).
 */
export function redactor(secrets: (string | undefined)[]): (text: string) => string {
  const present = secrets.filter((s): s is string => typeof s === "string" && s.length >= 8);
  return (text) => present.reduce((out, secret) => out.split(secret).join("[redacted]"), text);
}
