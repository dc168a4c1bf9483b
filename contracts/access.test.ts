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

describe("port scopes (issue 40)", () => {
  it("parses session:<ns>/<name>:port:<port> for 1024-65535 only, and formats it back", () => {
    expect(parseScope("session:team-a/web:port:3000")).toEqual({
      kind: "port",
      namespace: "team-a",
      name: "web",
      port: 3000,
    });
    expect(formatScope(parsed("session:team-a/web:port:65535"))).toBe("session:team-a/web:port:65535");
    for (const bad of [
      "session:team-a/web:port:80",
      "session:team-a/web:port:1023",
      "session:team-a/web:port:65536",
      "session:team-a/web:port:03000",
      "session:team-a/web:port:",
      "session:team-a/web:port:3000:chat",
      "session:team-a/web:ports:3000",
    ]) {
      expect(parseScope(bad), bad).toBeUndefined();
      expect(Scope.safeParse(bad).success, bad).toBe(false);
    }
  });

  it("opens exactly its port of its session: no other port, session, action or namespace need", () => {
    const port = parsed("session:team-a/web:port:3000");
    const portNeed = (name: string, p: number): Extract<Need, { kind: "session" }> => ({
      kind: "session",
      namespace: "team-a",
      name,
      action: "port",
      port: p,
    });
    expect(grants(port, portNeed("web", 3000))).toBe(true);
    expect(grants(port, portNeed("web", 3001))).toBe(false);
    expect(grants(port, portNeed("other", 3000))).toBe(false);
    expect(
      grants(port, { kind: "session", namespace: "team-b", name: "web", action: "port", port: 3000 }),
    ).toBe(false);
    for (const action of ["view", "chat"] as const)
      expect(grants(port, { kind: "session", namespace: "team-a", name: "web", action })).toBe(false);
    expect(grants(port, { kind: "namespace", namespace: "team-a", action: "view" })).toBe(false);
    expect(grants(port, { kind: "admin" })).toBe(false);
    // Bound to the session's uid at issue time, like a chat scope.
    if (port.kind !== "port") throw new Error("not a port scope");
    expect(grants({ ...port, uid: "u1" }, { ...portNeed("web", 3000), uid: "u2" })).toBe(false);
  });

  it("a port need is granted by admin, the namespace's edit and the session's chat, never by view", () => {
    const need: Need = { kind: "session", namespace: "team-a", name: "web", action: "port", port: 3000 };
    expect(allows([parsed("admin")], need)).toBe(true);
    expect(allows([parsed("namespace:team-a:edit")], need)).toBe(true);
    expect(allows([parsed("session:team-a/web:chat")], need)).toBe(true);
    expect(allows([parsed("namespace:team-a:view")], need)).toBe(false);
    expect(allows([parsed("session:team-a/other:chat")], need)).toBe(false);
    expect(scopesGranting(need)).toEqual([
      "session:team-a/web:port:3000",
      "session:team-a/web:chat",
      "namespace:team-a:edit",
    ]);
  });

  it("a token of port scopes only gets the session-token default lifetime", () => {
    expect(CreateTokenRequest.safeParse({ name: "p", scopes: ["session:a/b:port:3000"] }).success).toBe(true);
  });
});
