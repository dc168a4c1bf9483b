import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CREDENTIAL_FILE_NAME, RunnerCredential } from "./credential.ts";

const RUNNER_TOKEN = "shared-runner-token-0123456789";
const ISSUED = `asr_${"a".repeat(43)}`;
let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));
const fresh = () => {
  dir = mkdtempSync(join(tmpdir(), "runner-credential-"));
  return join(dir, CREDENTIAL_FILE_NAME);
};

describe("the runner's credential (PROTOCOL.md §2)", () => {
  it("registers with the runner token, then keeps the issued credential 0600 and presents it, across restarts", () => {
    const file = fresh();
    const credential = new RunnerCredential(RUNNER_TOKEN, file);
    expect(credential.bearer()).toBe(RUNNER_TOKEN);
    expect(credential.issued(ISSUED)).toEqual({ ok: true });
    expect(credential.bearer()).toBe(ISSUED);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, "utf8").trim()).toBe(ISSUED);
    expect(new RunnerCredential(RUNNER_TOKEN, file).bearer()).toBe(ISSUED);
  });

  it("falls back to the runner token when the server does not know the saved credential (401)", () => {
    const file = fresh();
    writeFileSync(file, `${ISSUED}\n`, { mode: 0o600 });
    const credential = new RunnerCredential(RUNNER_TOKEN, file);
    expect(credential.refused()).toBe(true);
    expect(credential.bearer()).toBe(RUNNER_TOKEN);
    expect(credential.refused()).toBe(false); // the runner token itself was refused: nothing to fall back to
    const next = `asr_${"b".repeat(43)}`;
    credential.issued(next);
    expect(credential.bearer()).toBe(next);
  });

  it("presents a credential given explicitly as it is, and never reads or writes the file", () => {
    const file = fresh();
    writeFileSync(file, `asr_${"c".repeat(43)}\n`, { mode: 0o600 });
    const credential = new RunnerCredential(ISSUED, file);
    expect(credential.bearer()).toBe(ISSUED);
    expect(credential.refused()).toBe(false);
    credential.issued(`asr_${"d".repeat(43)}`);
    expect(readFileSync(file, "utf8").trim()).toBe(`asr_${"c".repeat(43)}`);
  });
});
