import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SqliteTokenStore } from "../store/sqlite-token-store.ts";
import { ApiTokens } from "./api-tokens.ts";

const ADMIN = "admin-token-for-fuzz-0123456789";
const RUNNER = "runner-token-for-fuzz-0123456789";

describe("bearer tokens (property-based)", () => {
  it("no made-up or mutated token authenticates; the real one does", async () => {
    const store = new SqliteTokenStore(":memory:");
    const tokens = new ApiTokens({ adminToken: ADMIN, runnerToken: RUNNER, store });
    const { token } = await tokens.create({ name: "real", scopes: ["namespace:a:view"] });
    expect(await tokens.authenticate(`Bearer ${token}`)).toMatchObject({
      ok: true,
      principal: { name: "real" },
    });
    const base64url = fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_");
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ maxLength: 200 }),
          fc.array(base64url, { minLength: 43, maxLength: 43 }).map((chars) => `ast_${chars.join("")}`),
          // The real token with one character changed.
          fc.tuple(fc.nat({ max: token.length - 1 }), base64url).map(([at, c]) => {
            const changed = token.slice(0, at) + c + token.slice(at + 1);
            return changed === token ? `${token}x` : changed;
          }),
        ),
        async (text) => {
          const answer = await tokens.authenticate(`Bearer ${text}`);
          if (text === ADMIN) return;
          expect(answer.ok).toBe(false);
        },
      ),
      { numRuns: 500 },
    );
    await store.close();
  });
});
