import { describe, expect, it, vi } from "vitest";
import { tokenToUse } from "./token-handover.ts";

describe("a token handed over in /ui/#token=", () => {
  it("is taken without asking when the tab holds none or the same one", () => {
    const ask = vi.fn(() => false);
    expect(tokenToUse("", "ast_new", ask)).toBe("ast_new");
    expect(tokenToUse("ast_same", "ast_same", ask)).toBe("ast_same");
    expect(tokenToUse("ast_held", null, ask)).toBe("ast_held");
    expect(ask).not.toHaveBeenCalled();
  });

  it("replaces a different token already in use only when the user says so", () => {
    const refuse = vi.fn(() => false);
    expect(tokenToUse("ast_held", "ast_other", refuse)).toBe("ast_held");
    expect(refuse).toHaveBeenCalledOnce();
    expect(tokenToUse("ast_held", "ast_other", () => true)).toBe("ast_other");
  });
});
