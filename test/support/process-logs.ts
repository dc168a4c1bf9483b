/**
 * What the processes a test started (the server, runners: `launch` in system.ts) logged while it
 * ran, for a failed test's report: CI keeps only its output, and a failure's cause is most often
 * in a warning the server or runner wrote (a lost link, a failed step), not in the assertion.
 * `failure-logs.ts` (the engine tier's setup file) marks each test's start and, when it fails,
 * attaches the excerpt to the test's meta; flaky-reporter.ts prints it at the end of the run.
 */

/** `mark`: where the current test began in its log; `previous`: where the test before it began. */
type Launched = { name: string; pid: number | undefined; logs: string[]; mark: number; previous: number };

const launched: Launched[] = [];

/** Keeps a launched process's log (the array `launch` fills) for excerpts. */
export function trackProcessLog(name: string, pid: number | undefined, logs: string[]): void {
  launched.push({ name, pid, logs, mark: 0, previous: 0 });
}

/**
 * A test starts: excerpts leave out what was logged before the test before it (a failure's cause
 * is sometimes a warning of the test before: a session left healing, a workload lost).
 */
export function markProcessLogs(): void {
  for (const p of launched) {
    p.previous = p.mark;
    p.mark = p.logs.length;
  }
}

/** The warnings and errors logged since the previous test began, newest last, at most `max` lines in all. */
export function processLogExcerpt(max = 40): string[] {
  const lines: string[] = [];
  for (const p of launched) {
    const text = p.logs.slice(p.previous).join("");
    for (const line of text.split("\n"))
      if (/"level":"(warn|error)"/.test(line) || /\b(Error|panic|FATAL)\b/.test(line))
        lines.push(`${p.name}[${p.pid ?? "?"}] ${line.slice(0, 400)}`);
  }
  return lines.slice(-max);
}
