/**
 * The conformance precheck (image-precheck.ts) on images built here on the test bed's dockerd:
 * a deliberately broken runtime image `FROM scratch` holding only its adapter's script — no Node,
 * no shell — is refused with a message naming each missing path and what needs it; the reference
 * image, which holds what the reference runtime declares, passes.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient, uniqueName } from "../support/session-harness.ts";
import { referenceImage } from "../support/testbed.ts";
import { imageLacks } from "./image-precheck.ts";

const BROKEN = `${uniqueName("conformance-broken")}:latest`;

beforeAll(() => {
  const context = mkdtempSync(join(tmpdir(), "broken-image-"));
  mkdirSync(join(context, "app"));
  writeFileSync(join(context, "app", "adapter-main.ts"), "// an adapter with nothing to run it\n");
  writeFileSync(
    join(context, "Dockerfile"),
    'FROM scratch\nCOPY app /app\nUSER 65532\nENTRYPOINT ["/usr/local/bin/node", "/app/adapter-main.ts"]\n',
  );
  execFileSync("docker", ["build", "-q", "-t", BROKEN, context], { stdio: ["ignore", "ignore", "inherit"] });
});

afterAll(async () => {
  await dockerClient()
    .getImage(BROKEN)
    .remove({ force: true })
    .catch(() => undefined);
});

describe("conformance precheck: the image holds what the runtime declares", () => {
  it("refuses a FROM scratch image without Node or a shell, naming each missing path and what needs it", async () => {
    const missing = await imageLacks(dockerClient(), BROKEN, {
      capabilities: ["streaming", "tools", "resume"],
      agent: { command: ["/usr/local/bin/node", "/app/agent.ts"] },
    });
    expect(missing).toEqual([
      `image ${BROKEN} lacks /usr/local/bin/node (the program of its entrypoint (the adapter))`,
      `image ${BROKEN} lacks /app/agent.ts (a file spec.agent.command runs)`,
      `image ${BROKEN} lacks /bin/sh (a shell, for the tools it declares)`,
    ]);
  });

  it("passes the reference image for what the reference runtime declares", async () => {
    expect(
      await imageLacks(dockerClient(), referenceImage().image, {
        capabilities: ["streaming", "resume"],
        agent: { command: ["/bin/node", "/app/runtimes/reference/agent.ts"] },
      }),
    ).toEqual([]);
  });
});
