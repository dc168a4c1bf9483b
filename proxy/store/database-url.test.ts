import { describe, expect, it } from "vitest";
import { redactDatabaseUrl } from "./database-url.ts";

describe("database URL in logs", () => {
  it("shows where the database is, never its password", () => {
    expect(redactDatabaseUrl("postgres://app:s3cret@127.0.0.1:5433/db")).toBe(
      "postgres://app:***@127.0.0.1:5433/db",
    );
    expect(redactDatabaseUrl("postgres://127.0.0.1/db?password=s3cret")).not.toContain("s3cret");
    expect(redactDatabaseUrl("postgres://app@127.0.0.1/db")).toBe("postgres://app@127.0.0.1/db");
  });
});
