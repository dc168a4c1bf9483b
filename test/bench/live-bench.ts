/**
 * Issue 37's targets table in one run: every row measured back to back (each operation sent as
 * soon as the previous one reached its phase) and settled (each after the previous operation's
 * background recording finished), beside the engine floor measured in the same run, with the
 * target and ✓/✗ for each mode.
 *
 *   node test/bench/live-bench.ts [runs=5] [--runtimes reference,pi,compass,hermes] [--kubernetes]
 *     (the test bed must be up: scripts/testbed up node docker pulumi image base-image pi-image
 *      compass-image hermes-image, and pulumi-kubernetes kubernetes for --kubernetes)
 *
 * It runs the three benchmarks that measure the rows, one after the other, through their exported
 * functions (each also prints its own tables on the way):
 *   test/bench/session-bench.ts   (Docker, `--back-to-back`): stop and resume → Ready of the
 *                                 reference runtime, settled and back to back; the engine floor
 *                                 (a plain container of the reference image → its first /readyz)
 *   test/bench/pause-bench.ts     (twice: back to back, `--settled`): a request to a Paused session
 *                                 → first byte, PATCH paused → phase Paused, per runtime; its floor
 *                                 (a plain container: pause call → returned, unpause → /readyz)
 *   test/bench/resume-profile.ts  (twice per harness runtime: back to back, `--settled`): stop, then
 *                                 resume → the first answer, pi / compass / hermes
 *   --kubernetes: session-bench.ts `--engine kubernetes --back-to-back` for the Kubernetes row
 *                                 (resume → Ready; ~10 more minutes with 5 runs)
 * p50 (nearest rank) of `runs` each, except back-to-back stop and resume of session-bench (two a
 * run). The machine's load average is printed at the start and the end: the targets are for a
 * quiet 2-core machine.
 */
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { benchPause, type PauseBench, printPauseBench } from "./pause-bench.ts";
import { printResumeProfile, profileResume, resumeP50 } from "./resume-profile.ts";
import { benchSessions, printSessionBench, type SessionBench } from "./session-bench.ts";
import { p50 } from "./stats.ts";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    runtimes: { type: "string", default: "reference,pi,compass,hermes" },
    kubernetes: { type: "boolean", default: false },
  },
});
const runs = Number(positionals[0] ?? 5);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
const runtimes = values.runtimes.split(",");
const harnesses = runtimes.filter((r) => r !== "reference");

const command = `node test/bench/live-bench.ts ${process.argv.slice(2).join(" ")}`.trim();
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
const loadAtStart = load();
const started = new Date();
const progress = (what: string) => (done: number) =>
  process.stderr.write(`${what}: run ${done}/${runs} done\n`);

const docker = await benchSessions({
  runs,
  engine: "docker",
  backToBack: true,
  onRun: progress("docker sessions"),
});
printSessionBench(docker);
const pause = {
  backToBack: await benchPause({
    runs,
    runtimes,
    onRun: (r, done) => progress(`pause ${r}`)(done),
  }),
  settled: await benchPause({
    runs,
    runtimes,
    settle: true,
    onRun: (r, done) => progress(`pause ${r}, settled`)(done),
  }),
};
printPauseBench(pause.backToBack);
printPauseBench(pause.settled);
const resumes = new Map<string, { backToBack: number; settled: number }>();
for (const runtime of harnesses) {
  const backToBack = await profileResume({ runs, runtime, onRun: progress(`resume ${runtime}`) });
  const settled = await profileResume({
    runs,
    runtime,
    settle: true,
    onRun: progress(`resume ${runtime}, settled`),
  });
  printResumeProfile(backToBack);
  printResumeProfile(settled);
  resumes.set(runtime, { backToBack: resumeP50(backToBack).answer, settled: resumeP50(settled).answer });
}
let kubernetes: SessionBench | undefined;
if (values.kubernetes) {
  kubernetes = await benchSessions({
    runs,
    engine: "kubernetes",
    backToBack: true,
    onRun: progress("kubernetes sessions"),
  });
  printSessionBench(kubernetes);
}

type Row = { step: string; targetMs: number; backToBack: number; settled: number; floor: string };
const ms = (x: number) => (x < 1000 ? `${x.toFixed(0)} ms` : `${(x / 1000).toFixed(2)} s`);
const target = (x: number) => `≤ ${ms(x)}`;
const mark = (x: number, limit: number) => (Number.isNaN(x) ? "–" : x <= limit ? "✓" : "✗");
const floorReady = `plain container → /readyz ${ms(p50(docker.floor))}`;
const pauseFloor = (bench: PauseBench) =>
  `pause call ${ms(p50(bench.floor.pause))}, unpause → /readyz ${ms(p50(bench.floor.wake))}`;

const rows: Row[] = [];
for (const runtime of runtimes)
  rows.push({
    step: `request to a paused session → first byte, ${runtime}`,
    targetMs: 100,
    backToBack: p50(pause.backToBack.byRuntime.get(runtime)?.wake ?? []),
    settled: p50(pause.settled.byRuntime.get(runtime)?.wake ?? []),
    floor: pauseFloor(pause.backToBack),
  });
for (const runtime of runtimes)
  rows.push({
    step: `pause (request → Paused), ${runtime}`,
    targetMs: 100,
    backToBack: p50(pause.backToBack.byRuntime.get(runtime)?.pausePhase ?? []),
    settled: p50(pause.settled.byRuntime.get(runtime)?.pausePhase ?? []),
    floor: pauseFloor(pause.backToBack),
  });
rows.push({
  step: "stop right after another operation",
  targetMs: 300,
  backToBack: p50(docker.backToBack.stop),
  settled: p50(docker.samples.fast.stop),
  floor: floorReady,
});
rows.push({
  step: "resume from stopped → Ready, reference",
  targetMs: 1200,
  backToBack: p50(docker.backToBack.resume),
  settled: p50(docker.samples.fast.resume),
  floor: floorReady,
});
for (const [runtime, answer] of resumes)
  rows.push({
    step: `resume from stopped → first answer, ${runtime}`,
    targetMs: 2500,
    backToBack: answer.backToBack,
    settled: answer.settled,
    floor: floorReady,
  });
if (kubernetes)
  rows.push({
    step: "Kubernetes resume from stopped → Ready",
    targetMs: 3000,
    backToBack: p50(kubernetes.backToBack.resume),
    settled: p50(kubernetes.samples.fast.resume),
    floor: floorReady,
  });

console.log(
  `\nIssue 37's targets, Docker unless said; p50 of ${runs} runs each; the engine floor from the same run.`,
);
console.log(`command: ${command}`);
console.log(
  `started ${started.toISOString()}, ended ${new Date().toISOString()}; load average (1, 5, 15 min) at the start ${loadAtStart}, at the end ${load()}`,
);
if (!kubernetes) console.log("(the Kubernetes row: add --kubernetes)");
console.log("\n| step | target | back to back | | settled | | engine floor (same run) |");
console.log("|---|---|---|---|---|---|---|");
for (const row of rows)
  console.log(
    `| ${row.step} | ${target(row.targetMs)} | ${ms(row.backToBack)} | ${mark(row.backToBack, row.targetMs)} | ${ms(row.settled)} | ${mark(row.settled, row.targetMs)} | ${row.floor} |`,
  );
