import type { Reporter, TestCase } from "vitest/node";

/**
 * The engine tier retries a failed test once (vitest.config.ts): real engines on a shared 2-core
 * machine have moments. A test that needed the retry is not hidden: this reporter lists every one
 * at the end of the run, with the error of its failed try, so a flake is seen and fixed rather
 * than absorbed. A test that fails twice fails the run as before.
 */
export default class FlakyReporter implements Reporter {
  readonly #flaky: TestCase[] = [];

  onTestCaseResult(test: TestCase): void {
    if (test.diagnostic()?.flaky) this.#flaky.push(test);
  }

  onTestRunEnd(): void {
    if (!this.#flaky.length) return;
    const lines = [`\nFLAKY: ${this.#flaky.length} test(s) failed once and passed on the retry:`];
    for (const test of this.#flaky) {
      lines.push(`  ${test.module.relativeModuleId} > ${test.fullName}`);
      for (const error of test.result().errors ?? [])
        lines.push(`    first try: ${error.message.split("\n")[0]}`);
    }
    console.log(lines.join("\n"));
  }
}
