import { describe, expect, it } from "vitest";
import { redactor } from "./redact.ts";

describe("redacting a session's secrets from what leaves the adapter", () => {
  it("replaces every occurrence of each secret, ignores absent and short ones", () => {
    const redact = redactor(["sk-live-0123456789", undefined, "short"]);
    expect(redact("key sk-live-0123456789 and sk-live-0123456789 again, short stays")).toBe(
      "key [redacted] and [redacted] again, short stays",
    );
    expect(redactor([])("nothing to hide")).toBe("nothing to hide");
  });
});
