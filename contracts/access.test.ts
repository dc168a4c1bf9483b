import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  allows,
  CreateTokenRequest,
  formatScope,
  grants,
  type Need,
  parseScope,
  Scope,
  scopesGranting,
} from "./access.ts";

const label = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);
const parsed = (text: string) => {
  const scope = parseScope(text);
  if (!scope) throw new Error(`not a scope: ${text}`);
  return scope;
};

describe("scope grammar", () => {
  it("parses the four fixed forms", () => {
    expect(parseScope("admin")).toEqual({ kind: "admin" });
    expect(parseScope("namespace:team-a:edit")).toEqual({
      kind: "namespace",
      namespace: "team-a",
      role: "edit",
    });
    expect(parseScope("namespace:team-a:view")).toEqual({
      kind: "namespace",
      namespace: "team-a",
      role: "view",
    });
    expect(parseScope("session:team-a/chat-1:chat")).toEqual({
      kind: "session",
      namespace: "team-a",
      name: "chat-1",
      role: "chat",
    });
  });

  it.each([
    "",
    "Admin",
    "admin ",
    "namespace:team-a",
    "namespace:team-a:admin",
    "namespace:Team:edit",
    "namespace::view",
    "namespace:a/b:view",
    "session:team-a:chat",
    "session:team-a/chat-1:edit",
    "session:team-a/chat-1/x:chat",
    "session:-a/b:chat",
    "namespace:*:edit",
  ])("refuses %j", (text) => {
    expect(parseScope(text)).toBeUndefined();
    expect(Scope.safeParse(text).success).toBe(false);
  });

  it("round-trips every well-formed scope string", () => {
    fc.assert(
      fc.property(label, label, fc.constantFrom("edit", "view"), (ns, name, role) => {
        expect(parseScope(`namespace:${ns}:${role}`)).toEqual({ kind: "namespace", namespace: ns, role });
        for (const text of [`namespace:${ns}:${role}`, `session:${ns}/${name}:chat`, "admin"])
          expect(formatScope(parsed(text))).toBe(text);
        expect(parseScope(`session:${ns}/${name}:chat`)).toEqual({
          kind: "session",
          namespace: ns,
          name,
          role: "chat",
        });
      }),
    );
  });

  it("never throws and agrees with the zod schema on arbitrary text", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (text) => {
        expect(parseScope(text) !== undefined).toBe(Scope.safeParse(text).success);
      }),
    );
  });
});

describe("what a scope grants", () => {
  const viewA: Need = { kind: "namespace", namespace: "a", action: "view" };
  const editA: Need = { kind: "namespace", namespace: "a", action: "edit" };
  const readS: Need = { kind: "session", namespace: "a", name: "s", action: "view" };
  const chatS: Need = { kind: "session", namespace: "a", name: "s", action: "chat" };
  const admin: Need = { kind: "admin" };

  it.each([
    ["admin", [viewA, editA, readS, chatS, admin], []],
    ["namespace:a:edit", [viewA, editA, readS, chatS], [admin]],
    ["namespace:a:view", [viewA, readS], [editA, chatS, admin]],
    ["namespace:b:edit", [], [viewA, editA, readS, chatS, admin]],
    ["session:a/s:chat", [readS, chatS], [viewA, editA, admin]],
    ["session:a/other:chat", [], [viewA, editA, readS, chatS, admin]],
    ["session:b/s:chat", [], [viewA, editA, readS, chatS, admin]],
  ] as const)("%s", (scope, granted, refused) => {
    for (const need of granted) expect(grants(parsed(scope), need)).toBe(true);
    for (const need of refused) expect(grants(parsed(scope), need)).toBe(false);
  });

  it("a need is granted exactly by the scopes its message names (or admin)", () => {
    fc.assert(
      fc.property(label, label, label, fc.constantFrom("view", "chat", "edit"), (ns, name, other, action) => {
        const need: Need =
          action === "edit"
            ? { kind: "namespace", namespace: ns, action }
            : { kind: "session", namespace: ns, name, action };
        for (const text of scopesGranting(need)) expect(allows([parsed(text)], need)).toBe(true);
        const candidates = [
          `namespace:${other}:edit`,
          `namespace:${other}:view`,
          `session:${other}/${name}:chat`,
          `session:${ns}/${other}:chat`,
          `namespace:${ns}:view`,
          `namespace:${ns}:edit`,
          `session:${ns}/${name}:chat`,
        ];
        for (const text of candidates)
          expect(allows([parsed(text)], need)).toBe(scopesGranting(need).includes(text));
      }),
    );
  });
});

describe("CreateTokenRequest", () => {
  it("takes a name, scopes and an optional ttl", () => {
    expect(CreateTokenRequest.parse({ name: "portal", scopes: ["namespace:a:view"], ttl: "15m" })).toEqual({
      name: "portal",
      scopes: ["namespace:a:view"],
      ttl: "15m",
    });
  });

  it.each([
    { name: "portal", scopes: [] },
    { name: "portal", scopes: ["root"] },
    { name: "Portal", scopes: ["admin"] },
    { name: "portal", scopes: ["admin", "admin"] },
    { name: "portal", scopes: ["admin"], ttl: "0" },
    { name: "portal", scopes: ["admin"], ttl: "forever" },
    { name: "portal", scopes: ["admin"], ttl: "9000h" },
    { name: "portal", scopes: ["admin"], extra: true },
  ])("refuses %j", (body) => {
    expect(CreateTokenRequest.safeParse(body).success).toBe(false);
  });
});
