import { describe, expect, it } from "vitest";
import { passedHeaders, SESSION_PORTS_MAX, SessionPorts } from "./session-ports.ts";

const issues = (value: unknown) => {
  const r = SessionPorts.safeParse(value);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("spec.ports", () => {
  it("takes up to 8 unprivileged ports with DNS-label names", () => {
    expect(
      issues([
        { port: 3000, name: "web" },
        { port: 65535, name: "top" },
        { port: 1024, name: "low" },
      ]),
    ).toEqual([]);
    expect(issues([])).toEqual([]);
  });

  it("refuses out of range, the adapter's port, duplicates and bad names, naming the element", () => {
    expect(issues([{ port: 80, name: "web" }])).toEqual(["0.port: must be an integer from 1024 to 65535"]);
    expect(issues([{ port: 65536, name: "web" }])).toEqual(["0.port: must be an integer from 1024 to 65535"]);
    expect(issues([{ port: 3000.5, name: "web" }])).toEqual([
      "0.port: must be an integer from 1024 to 65535",
    ]);
    expect(issues([{ port: 8080, name: "web" }])).toEqual([
      "0.port: must not be the adapter's own port 8080",
    ]);
    expect(
      issues([
        { port: 3000, name: "a" },
        { port: 3000, name: "b" },
      ]),
    ).toEqual(["1.port: port 3000 is declared twice"]);
    expect(
      issues([
        { port: 3000, name: "a" },
        { port: 3001, name: "a" },
      ]),
    ).toEqual(["1.name: name a is declared twice"]);
    expect(issues([{ port: 3000, name: "Web" }])[0]).toMatch(/^0\.name: must be a DNS label/);
    expect(issues([{ port: 3000, name: "a-very-long-port-name" }])[0]).toMatch(/at most 15/);
    expect(issues([{ port: 3000, name: "web", extra: 1 }])[0]).toMatch(/extra/);
    expect(issues([{ port: 3000, name: "adapter" }])).toEqual([
      "0.name: must not be adapter (the adapter's port is named so)",
    ]);
    const nine = Array.from({ length: SESSION_PORTS_MAX + 1 }, (_, i) => ({ port: 3000 + i, name: `p${i}` }));
    expect(issues(nine)).toEqual([": at most 8 ports"]);
  });
});

describe("headers through a port", () => {
  it("drops hop-by-hop headers and the caller's authorization, keeps the rest in lower case", () => {
    expect(
      passedHeaders([
        ["Authorization", "Bearer ast_secret"],
        ["Connection", "keep-alive"],
        ["Transfer-Encoding", "chunked"],
        ["Host", "proxy"],
        ["Content-Type", "text/plain"],
        ["Cookie", "a=1"],
        ["X-Custom", "yes"],
      ]),
    ).toEqual([
      ["content-type", "text/plain"],
      ["cookie", "a=1"],
      ["x-custom", "yes"],
    ]);
  });
});
