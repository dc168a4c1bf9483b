import { describe, expect, it } from "vitest";
import { CodedError } from "../../contracts/errors.ts";
import { whenApiServerAnswers } from "./pod-watch.ts";

/** What undici throws when nothing listens: "fetch failed" with the connect error as its cause. */
function refused(): Error {
  return Object.assign(new TypeError("fetch failed"), {
    cause: Object.assign(new Error("connect ECONNREFUSED 10.96.0.1:443"), { code: "ECONNREFUSED" }),
  });
}

describe("a starting runner's first list waits for an API server that does not answer yet", () => {
  it("retries a refused connection and goes on once the API server answers, logging each wait", async () => {
    let calls = 0;
    const logged: unknown[] = [];
    const list = await whenApiServerAnswers(
      async () => {
        calls++;
        if (calls < 3) throw refused();
        return ["pod"];
      },
      { server: "https://10.96.0.1:443", log: (...line) => logged.push(line), retryMs: 5, waitMs: 5_000 },
    );
    expect(list).toEqual(["pod"]);
    expect(calls).toBe(3);
    expect(logged).toHaveLength(2);
    expect(JSON.stringify(logged[0])).toContain("ECONNREFUSED");
  });

  it("past its wait says which API server did not answer and why, as FAILED_PRECONDITION", async () => {
    const error = await whenApiServerAnswers(
      async () => {
        throw refused();
      },
      { server: "https://10.96.0.1:443", log: () => undefined, retryMs: 5, waitMs: 30 },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CodedError);
    expect((error as CodedError).code).toBe("FAILED_PRECONDITION");
    expect((error as Error).message).toContain("https://10.96.0.1:443");
    expect((error as Error).message).toContain("ECONNREFUSED");
  });

  it("an API server that answers with an error (403) is not waited for", async () => {
    let calls = 0;
    const forbidden = Object.assign(new Error("HTTP-Code: 403"), { code: 403 });
    const error = await whenApiServerAnswers(
      async () => {
        calls++;
        throw forbidden;
      },
      { server: "https://10.96.0.1:443", log: () => undefined, retryMs: 5, waitMs: 5_000 },
    ).catch((e: unknown) => e);
    expect(error).toBe(forbidden);
    expect(calls).toBe(1);
  });
});
