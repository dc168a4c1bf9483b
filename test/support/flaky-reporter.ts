import type { Reporter, TestCase } from "vitest/node";

/**
 * The engine tier retries a failed test once (vitest.config.ts): real engines on a shared 2-core
 * machine have moments. A test that needed the retry is not hidden: this reporter lists every one
 * at the end of the run, with the error of its failed try, so a flake is seen and fixed rather
 * than absorbed. A test that fails twice fails the run as before.
 */
export default class FlakyReporter implements Reporter {
  readonly #flaky: TestCase[] = [];
  readonly #failed: TestCase[] = [];

  onTestCaseResult(test: TestCase): void {
    if (test.diagnostic()?.flaky) this.#flaky.push(test);
    else if (test.result().state === "failed") this.#failed.push(test);
  }

  onTestRunEnd(): void {
    const lines: string[] = [];
    if (this.#flaky.length) {
      lines.push(`\nFLAKY: ${this.#flaky.length} test(s) failed once and passed on the retry:`);
      for (const test of this.#flaky) {
        lines.push(`  ${test.module.relativeModuleId} > ${test.fullName}`);
        for (const error of test.result().errors ?? [])
          lines.push(`    first try: ${error.message.split("\n")[0]}`);
        lines.push(...processLog(test));
      }
    }
    // A failed test's process log (test/engine/failure-logs.ts): where its cause most often is.
    const logged = this.#failed.filter((test) => processLog(test).length);
    if (logged.length) {
      lines.push(
        `\nFAILED: what the processes of ${logged.length} failed test(s) warned while they and the test before each ran:`,
      );
      for (const test of logged)
        lines.push(`  ${test.module.relativeModuleId} > ${test.fullName}`, ...processLog(test));
    }
    if (lines.length) console.log(lines.join("\n"));
  }
}

/** The test's process-log excerpt (its last failed try), indented for the summary. */
function processLog(test: TestCase): string[] {
  return (test.meta().processLog ?? []).map((line) => `      ${line}`);
}
