/**
 * The engine tier's setup file: a failed test carries the warnings and errors its processes logged
 * while it ran (process-logs.ts) in its meta, which flaky-reporter.ts prints at the end of the run.
 */
import { beforeEach } from "vitest";
import { markProcessLogs, processLogExcerpt } from "../support/process-logs.ts";

declare module "vitest" {
  interface TaskMeta {
    /** The warnings and errors of the processes the test started, when it failed. */
    processLog?: string[];
  }
}

beforeEach(({ task, onTestFailed }) => {
  markProcessLogs();
  onTestFailed(async () => {
    // What the processes log just after the failure often says why (an exit the engine reports a
    // moment later, a heal): a moment is waited for it.
    await new Promise((r) => setTimeout(r, 1_500));
    const lines = processLogExcerpt();
    if (lines.length) task.meta.processLog = lines;
  });
});
