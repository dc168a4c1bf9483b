import { describe, expect, it } from "vitest";
import { oneShotContainerOptions } from "./one-shot.ts";

describe("one-shot run containers", () => {
  const command = {
    kind: "run_once" as const,
    run_id: "r1",
    image: `127.0.0.1:5000/x@sha256:${"a".repeat(64)}`,
    input: "hi",
    env: {},
    credentials: {},
    egress: [],
    timeout_ms: 1000,
  };

  it("are hardened, on the run's own network, with a capped log", () => {
    const options = oneShotContainerOptions(command, "as-run-r1-abc", { a: "b" }, ["A=1"]);
    expect(options).toMatchObject({
      name: "as-run-r1-abc",
      User: "65532:65532",
      Env: ["A=1"],
      HostConfig: {
        ReadonlyRootfs: true,
        CapDrop: ["ALL"],
        NetworkMode: "as-run-r1-abc-net",
        LogConfig: { Type: "json-file", Config: { "max-size": "2097152", "max-file": "2" } },
      },
    });
  });
});
