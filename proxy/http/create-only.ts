import type { Context } from "hono";
import { z } from "zod";
import { parseInput } from "../lifecycle/request-body.ts";

/**
 * Whether a PUT asks to create only: `If-None-Match: *` (RFC 9110 §13.1.2) succeeds only when
 * no resource has the name, so a client's "Create" never replaces one (issue 34: a UI Create
 * re-using a name once reset an existing session). These resources carry no ETags: any other
 * value is INVALID_ARGUMENT rather than silently ignored.
 */
export function createOnly(c: Context): boolean {
  const value = c.req.header("If-None-Match");
  if (value === undefined) return false;
  parseInput(z.literal("*"), value.trim(), "If-None-Match", { in: "header", name: "If-None-Match" });
  return true;
}
