/**
 * Snapshots on Docker (issue 38) at the engine driver (runner/docker/snapshots.ts), beside the
 * floor every step pays, measured in the same run.
 *
 *   node test/bench/snapshot-driver-bench.ts [runs=5]
 *     (the test bed must be up: scripts/testbed up node docker base-image)
 *
 * A session volume holding 50 MB in 500 files (100 KB each, in 10 directories), written as the
 * agent would (uid 65532). Each run:
 *   take     driver.snapshots.take → resolved (the copy whole, its size summed)
 *   restore  driver.snapshots.restore of that snapshot into the session volume → resolved
 *   read     driver.snapshots.read → its tar's last byte (into memory)
 *   write    driver.snapshots.write of that tar into a new storage → resolved
 *   remove   driver.snapshots.remove of both → resolved (no stack: bare volumes)
 * The floor: `docker run --rm` of the same git image doing nothing (`true`), through the same
 * client (create, attach, start, wait, remove), hardened alike. p50 is nearest-rank.
 */
import { randomBytes } from "node:crypto";
import type Docker from "dockerode";
import { snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { Labels, workloadName } from "../../contracts/session-spec.ts";
import { DockerSnapshots } from "../../runner/docker/snapshots.ts";
import { shortLivedHostConfig } from "../../runner/docker/short-lived-container.ts";
import { dockerClient } from "../support/session-harness.ts";
import { applyTestbedEnv, builtImage } from "../support/testbed.ts";
import { p50 } from "./stats.ts";

const runs = Number(process.argv[2] ?? 5);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
applyTestbedEnv();

const docker = dockerClient();
const image = builtImage("base-image").image;
const suffix = randomBytes(3).toString("hex");
const session = `snapb-${suffix}`;
const container = workloadName("bench", session);
const volume = `${container}-workspace`;
const snapshots = new DockerSnapshots(docker, image);
const MB = 1024 * 1024;

/** A hardened container of the git image running `script` to its end, removed after. */
async function run(script: string, mounts: Docker.MountSettings[] = []): Promise<void> {
  const c = await docker.createContainer({
    Image: image,
    Entrypoint: ["/bin/sh", "-c", script],
    User: "65532:65532",
    HostConfig: shortLivedHostConfig({ network: "none", mounts, tmpMiB: 16, memoryMiB: 256, pids: 64 }),
  });
  try {
    const attached = (await c.attach({ stream: true, stdout: true, stderr: true })) as NodeJS.ReadableStream;
    attached.resume();
    await c.start();
    const { StatusCode } = (await c.wait()) as { StatusCode: number };
    if (StatusCode !== 0) throw new Error(`${script}: exit ${StatusCode}`);
  } finally {
    await c.remove({ force: true });
  }
}

const target = (name: string) => ({
  storage: snapshotStorageName("bench", `${name}-${suffix}`),
  namespace: "bench",
  name: `${name}-${suffix}`,
});

async function timed(f: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
}

const samples = {
  floor: [] as number[],
  take: [] as number[],
  restore: [] as number[],
  read: [] as number[],
  write: [] as number[],
  remove: [] as number[],
};
let bytes = 0;
let archiveBytes = 0;
try {
  await docker.createVolume({
    Name: volume,
    Labels: { [Labels.managedBy]: "agent-sessions", [Labels.namespace]: "bench", [Labels.session]: session },
  });
  await run(
    "cd /workspace && for d in 0 1 2 3 4 5 6 7 8 9; do mkdir d$d; for f in $(seq 1 50); do head -c 102400 /dev/urandom > d$d/f$f; done; done",
    [{ Type: "volume", Source: volume, Target: "/workspace" }],
  );
  for (let i = 0; i < runs; i++) {
    samples.floor.push(await timed(() => run("true")));
    const taken = target(`t${i}`);
    const imported = target(`i${i}`);
    samples.take.push(
      await timed(async () => ({ sizeBytes: bytes } = await snapshots.take(container, taken))),
    );
    samples.restore.push(await timed(() => snapshots.restore(container, taken)));
    let archive = Buffer.alloc(0);
    samples.read.push(
      await timed(async () => {
        const chunks: Buffer[] = [];
        for await (const chunk of await snapshots.read(taken, 1024 * MB)) chunks.push(chunk);
        archive = Buffer.concat(chunks);
      }),
    );
    archiveBytes = archive.length;
    samples.write.push(
      await timed(() =>
        snapshots.write(imported, {
          size: archive.length,
          open: async function* () {
            for (let o = 0; o < archive.length; o += MB) yield archive.subarray(o, o + MB);
          },
        }),
      ),
    );
    samples.remove.push(
      await timed(async () => Promise.all([snapshots.remove(taken), snapshots.remove(imported)])),
    );
  }
} finally {
  await docker
    .getVolume(volume)
    .remove()
    .catch(() => undefined);
}

const ms = (v: number[]) => `${Math.round(p50(v))} ms (${v.map(Math.round).join(", ")})`;
console.log(
  `snapshot-driver-bench: ${runs} runs, a volume of ${(bytes / MB).toFixed(1)} MiB in 500 files; tar ${(archiveBytes / MB).toFixed(1)} MiB`,
);
console.log(`  floor   docker run --rm of the git image (true)   p50 ${ms(samples.floor)}`);
console.log(`  take                                              p50 ${ms(samples.take)}`);
console.log(`  restore                                           p50 ${ms(samples.restore)}`);
console.log(
  `  read    (tar into memory)                         p50 ${ms(samples.read)}  ${(archiveBytes / MB / (p50(samples.read) / 1000)).toFixed(0)} MiB/s`,
);
console.log(
  `  write   (tar into a new storage)                  p50 ${ms(samples.write)}  ${(archiveBytes / MB / (p50(samples.write) / 1000)).toFixed(0)} MiB/s`,
);
console.log(`  remove  (two bare volumes)                        p50 ${ms(samples.remove)}`);
