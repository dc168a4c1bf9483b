/**
 * What leaves the runner in a session's logs has its secrets replaced by `[redacted]`: the
 * values the runner gave the workspace (its provider credentials, its adapter and gateway
 * tokens), and anything shaped like a credential (a bearer token, `sk-…`, `ast_…`, `ghp_…`, a
 * `…TOKEN=`/`…KEY=`/`…SECRET=`/`…PASSWORD=` assignment). Values shorter than 8 characters are not
 * looked for: they would match ordinary text.
 */
const PATTERNS: readonly [RegExp, string][] = [
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi, "$1 [redacted]"],
  [/\b(sk|ast|ghp|gho|ghs|xox[abp]|glpat)[-_][A-Za-z0-9_-]{8,}/g, "[redacted]"],
  [
    /\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY)[A-Z0-9_]*)(\s*[=:]\s*)("?)[^\s"',;]{4,}/gi,
    "$1$2$3[redacted]",
  ],
];

export function redactLine(line: string, secrets: readonly string[]): string {
  let out = line;
  for (const secret of secrets) if (secret.length >= 8) out = out.split(secret).join("[redacted]");
  for (const [pattern, replacement] of PATTERNS) out = out.replace(pattern, replacement);
  return out;
}
