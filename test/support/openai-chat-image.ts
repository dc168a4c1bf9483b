/**
 * The runtime image of test/fixtures/openai-chat-harness.ts: a harness that speaks only the
 * `openai-chat` session contract (issue 41). Built FROM the test bed's reference image for its
 * Node, busybox and non-root user, with its /app (our adapter, the reference agent) removed and
 * the harness as its entrypoint,
 * listening on OPENAI_CHAT_FIXTURE_PORT, and pushed to the test bed's registry: its digest-pinned
 * name is what an AgentRuntime approves. Tagged by the hash of the harness and the base image, so
 * a rerun builds nothing new.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { referenceImage, repoRoot } from "./testbed.ts";

/** The port the fixture harness listens on: not our adapter's 8080, so the runtime's `session.port` is what counts. */
export const OPENAI_CHAT_FIXTURE_PORT = 9090;

const HARNESS = "test/fixtures/openai-chat-harness.ts";

/** Builds (once per content) and pushes the fixture image; answers its digest-pinned name. */
export function openAIChatFixtureImage(): string {
  const base = referenceImage();
  const source = readFileSync(join(repoRoot, HARNESS));
  const dockerfile = [
    `FROM ${base.image}`,
    // Nothing of ours stays in it: no adapter, no reference agent for a start to execute.
    "USER 0:0",
    'RUN ["/bin/rm", "-rf", "/app"]',
    "USER 65532:65532",
    "COPY openai-chat-harness.ts /harness/openai-chat-harness.ts",
    `ENV HARNESS_PORT=${OPENAI_CHAT_FIXTURE_PORT} HARNESS_DATA_DIR=/workspace`,
    `EXPOSE ${OPENAI_CHAT_FIXTURE_PORT}`,
    'ENTRYPOINT ["/bin/node", "/harness/openai-chat-harness.ts"]',
    "",
  ].join("\n");
  const tag = createHash("sha256").update(dockerfile).update(source).digest("hex").slice(0, 16);
  const repo = base.repository.replace(/\/[^/]+$/, "/openai-chat-fixture");
  const ref = `${repo}:${tag}`;
  const ctx = mkdtempSync(join(tmpdir(), "openai-chat-image-"));
  try {
    copyFileSync(join(repoRoot, HARNESS), join(ctx, "openai-chat-harness.ts"));
    writeFileSync(join(ctx, "Dockerfile"), dockerfile);
    execFileSync("docker", ["build", "-q", "-t", ref, ctx], { stdio: ["ignore", "ignore", "pipe"] });
    execFileSync("docker", ["push", "-q", ref], { stdio: ["ignore", "ignore", "pipe"] });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  const digests = execFileSync(
    "docker",
    ["image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", ref],
    { encoding: "utf8" },
  );
  const pinned = digests.split("\n").find((d) => d.startsWith(`${repo}@sha256:`));
  if (!pinned) throw new Error(`no registry digest for ${ref}: ${digests}`);
  return pinned;
}
