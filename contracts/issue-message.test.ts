import { describe, expect, it } from "vitest";
import { z } from "zod";
import { describeZodError } from "./errors.ts";
import { ProvisionAgentWorkspaceRequest } from "./rpc.ts";

const said = (schema: z.ZodType, input: unknown) => {
  const result = schema.safeParse(input);
  if (result.success) throw new Error("expected a failure");
  return describeZodError(result.error, input);
};

describe("field errors in words a person understands", () => {
  const Body = z.strictObject({
    id: z.union([z.string().regex(/^[a-z]+$/, "lowercase letters only"), z.literal("")]),
    name: z.string().min(1).max(4),
    mode: z.enum(["fast", "slow"]),
    count: z.number().int().min(0),
    kind: z.discriminatedUnion("type", [
      z.object({ type: z.literal("a") }),
      z.object({ type: z.literal("b") }),
    ]),
  });
  const valid = { id: "x", name: "n", mode: "fast", count: 1, kind: { type: "a" } };

  it("says a missing field is required, also behind a union", () => {
    expect(said(Body, {})).toBe(
      "id: is required; name: is required; mode: is required; count: is required; kind: is required",
    );
  });

  it("names both choices of a union and never says a bare 'Invalid input'", () => {
    const message = said(Body, { ...valid, id: 5 });
    expect(message).toBe("id: must be a string or empty");
    expect(message).not.toContain("Invalid input");
  });

  it("keeps a message the schema wrote itself", () => {
    expect(said(Body, { ...valid, id: "A!" })).toBe("id: lowercase letters only");
    expect(said(z.object({ n: z.number().min(0, "n must not be negative") }), { n: -1 })).toBe(
      "n: n must not be negative",
    );
  });

  it("says the type it got, never the value", () => {
    expect(said(Body, { ...valid, name: 42 })).toBe("name: must be a string, not a number");
    expect(said(Body, { ...valid, count: 1.5 })).toBe("count: must be an integer, not a number");
  });

  it("states bounds, choices and unknown fields", () => {
    expect(said(Body, { ...valid, name: "" })).toBe("name: must not be empty");
    expect(said(Body, { ...valid, name: "toolong" })).toBe("name: must be at most 4 characters long");
    expect(said(Body, { ...valid, count: -1 })).toBe("count: must be at least 0");
    expect(said(Body, { ...valid, mode: "medium" })).toBe('mode: must be one of "fast", "slow"');
    expect(said(Body, { ...valid, kind: { type: "c" } })).toBe('kind.type: must be one of "a", "b"');
    expect(said(Body, { ...valid, color: "red" })).toBe("color: is not a field of this request");
  });
});

describe("client_request_id", () => {
  it("is optional on ProvisionAgentWorkspace and SpawnAgent: absent means no idempotency key", () => {
    expect(ProvisionAgentWorkspaceRequest.parse({ agent_ref: "alice" }).client_request_id).toBe("");
  });

  it("explains a bad key", () => {
    expect(said(ProvisionAgentWorkspaceRequest, { agent_ref: "alice", client_request_id: "a b" })).toBe(
      "client_request_id: letters, digits, '.', '_', ':' and '-' only",
    );
  });
});
