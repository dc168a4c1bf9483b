/**
 * The adapter's token out of its executed environment (adapter-token.ts), for real: a Node process
 * given ADAPTER_TOKEN re-executes itself and ends up with the token in memory only, nothing in
 * /proc/self/environ, and no handover file left.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "adapter-token-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

it("keeps the token in memory, out of the environment it was executed with, on the same PID", () => {
  const handover = join(dir, "tmp");
  const script = join(dir, "adapter.ts");
  writeFileSync(
    script,
    `import { readFileSync } from "node:fs";
import { adapterTokenOutOfEnvironment } from ${JSON.stringify(join(import.meta.dirname, "adapter-token.ts"))};
adapterTokenOutOfEnvironment();
console.log(JSON.stringify({
  pid: process.pid,
  environ: readFileSync("/proc/self/environ", "utf8"),
  token: process.env.ADAPTER_TOKEN,
  handover: process.env.ADAPTER_HANDOVER_FILE ?? null,
}));
`,
  );
  spawnSync("mkdir", [handover]);
  const run = spawnSync(process.execPath, ["--no-warnings", script], {
    env: {
      PATH: process.env.PATH,
      TMPDIR: handover,
      ADAPTER_TOKEN: "adapter-secret-0123456789",
      OTHER: "kept",
    },
  });
  expect(run.stderr.toString()).toBe("");
  const seen = JSON.parse(run.stdout.toString());
  expect(seen.token).toBe("adapter-secret-0123456789");
  expect(seen.environ).not.toContain("adapter-secret");
  expect(seen.environ).toContain("OTHER=kept");
  expect(seen.handover).toBeNull();
  expect(readdirSync(handover)).toEqual([]);
  expect(seen.pid).toBeGreaterThan(0);
});

it("does nothing without a token", () => {
  const script = join(dir, "adapter.ts");
  writeFileSync(
    script,
    `import { adapterTokenOutOfEnvironment } from ${JSON.stringify(join(import.meta.dirname, "adapter-token.ts"))};
adapterTokenOutOfEnvironment();
console.log(JSON.stringify({ token: process.env.ADAPTER_TOKEN ?? null }));
`,
  );
  const run = spawnSync(process.execPath, [script], { env: { PATH: process.env.PATH } });
  expect(JSON.parse(run.stdout.toString())).toEqual({ token: null });
});
