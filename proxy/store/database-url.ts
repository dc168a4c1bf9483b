import { z } from "zod";

/**
 * `AGENT_SESSIONS_DATABASE_URL`: a PostgreSQL connection string (`postgres://user:password@host:port/db`).
 * Messages never repeat the value: it carries the password.
 */
export const DatabaseUrl = z.string().superRefine((value, ctx) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    ctx.addIssue({ code: "custom", message: "must be a URL: postgres://user:password@host:port/database" });
    return;
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:")
    ctx.addIssue({
      code: "custom",
      message: "must be a postgres:// or postgresql:// URL (the only database besides the embedded SQLite)",
    });
  else if (!url.hostname && !url.searchParams.has("host"))
    ctx.addIssue({
      code: "custom",
      message: "must name a host: postgres://user:password@host:port/database",
    });
});

/** The connection string fit for a log line: the password replaced. */
export function redactDatabaseUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.password) url.password = "***";
    for (const key of [...url.searchParams.keys()])
      if (key.toLowerCase() === "password") url.searchParams.set(key, "***");
    return url.toString();
  } catch {
    return "(unparsable database URL)";
  }
}
