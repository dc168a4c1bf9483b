import { Hono } from "hono";
import { TokenName } from "../../contracts/access.ts";
import { parseInput, readJson } from "../lifecycle/request-body.ts";
import type { ApiTokens } from "./api-tokens.ts";

/**
 * `/v1/tokens` (admin only, route-access.ts): `POST` `{name, scopes, ttl?}` creates a token and
 * answers its secret this once; `GET` lists them (never a secret); `DELETE /{name}` revokes one.
 */
export function tokenRoutes(tokens: ApiTokens): Hono {
  return new Hono()
    .post("/", async (c) => c.json(await tokens.create(await readJson(c)), 201))
    .get("/", async (c) => c.json({ items: await tokens.list() }))
    .delete("/:name", async (c) => {
      const name = parseInput(TokenName, c.req.param("name"), "token name", { in: "path", name: "name" });
      await tokens.revoke(name);
      return c.json({ name, revoked: true });
    });
}
