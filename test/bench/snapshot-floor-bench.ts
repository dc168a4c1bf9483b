/**
 * The floors under a snapshot's export and import on Docker (issue 38): what the engine path the
 * runner uses costs alone, and the archive format's own CPU, on the same workspace the HTTP
 * benchmark (test/bench/snapshot-bench.ts) moves: 50 MB in 500 files, half random, half text.
 *
 *   node test/bench/snapshot-floor-bench.ts [runs=3]
 *     (the test bed must be up: scripts/testbed up node docker base-image)
 *
 * Each run, into memory and back, with no runner link and no server:
 *   read       DockerSnapshots.read (dockerd's archive of a never-started container) → its last byte
 *   write      DockerSnapshots.write of that tar (the runner's import: the tar re-written for
 *              dockerd, runner/docker/snapshot-tar.ts, and extracted by dockerd into a
 *              never-started container mounting a new volume)
 *   put        the same tar through dockerd's extract as it is, not re-written (what the
 *              re-write adds is write − put)
 *   re-write   the re-write alone, in this process (its CPU)
 *   gzip       the export's adaptive gzip of the tar (proxy/harness/adaptive-gzip.ts), in this
 *              process, and gunzip of it (the import's)
 *   link       the tar through a WebSocket on loopback (ws, as the runner link: 1 MiB binary
 *              messages, client → server, both ends in this process, so the time is the CPU of
 *              both), with a random masking key as RFC 6455 has it, and with the zero key the
 *              runner uses where no intermediary can stand (runner/link/link.ts)
 * MB/s are of the snapshot's bytes (what snapshot-bench.ts divides by). "read + write" is the
 * best export + import can reach through this engine path; the other rows are what the format and
 * the link cost on top of it (all run on the same 2 cores as the server and runner).
 */
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { gunzip } from "node:zlib";
import type Docker from "dockerode";
import WebSocket, { WebSocketServer } from "ws";
import { adaptiveGzip } from "../../proxy/harness/adaptive-gzip.ts";
import { snapshotTarForExtract } from "../../runner/docker/snapshot-tar.ts";
import { snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { Labels } from "../../contracts/session-spec.ts";
import { DockerSnapshots } from "../../runner/docker/snapshots.ts";
import { shortLivedHostConfig } from "../../runner/docker/short-lived-container.ts";
import { dockerClient } from "../support/session-harness.ts";
import { applyTestbedEnv, builtImage } from "../support/testbed.ts";
import { p50 } from "./stats.ts";

const runs = Number(process.argv[2] ?? 3);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
applyTestbedEnv();

const docker = dockerClient();
const image = builtImage("base-image").image;
const suffix = randomBytes(3).toString("hex");
const snapshots = new DockerSnapshots(docker, image);
const FILES = 500;
const TOTAL = 50_000_000;
const target = (name: string) => ({
  storage: snapshotStorageName("bench", `${name}-${suffix}`),
  namespace: "bench",
  name: `${name}-${suffix}`,
});

/** A hardened container of the git image running `script` to its end with `mounts`, removed after. */
async function run(script: string, mounts: Docker.MountSettings[]): Promise<void> {
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

async function timed(f: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
}

const samples = {
  read: [] as number[],
  write: [] as number[],
  put: [] as number[],
  rewrite: [] as number[],
  gzip: [] as number[],
  gunzip: [] as number[],
  linkMasked: [] as number[],
  linkZero: [] as number[],
};

/** `tar` in 1 MiB pieces. */
function* pieces(tar: Buffer): Generator<Buffer> {
  for (let o = 0; o < tar.length; o += 1024 * 1024) yield tar.subarray(o, o + 1024 * 1024);
}

/** The export's gzip of `tar`, as the server runs it: the compressed bytes. */
async function exportGzip(tar: Buffer): Promise<Buffer> {
  const g = adaptiveGzip();
  const out: Buffer[] = [];
  g.stream.on("data", (c: Buffer) => out.push(c));
  const ended = new Promise((r) => g.stream.on("end", r));
  for (const piece of pieces(tar)) g.write(piece);
  g.end();
  await ended;
  return Buffer.concat(out);
}

/** `tar` sent through a loopback WebSocket in 1 MiB binary messages, client → server; resolves at the last byte's arrival. */
async function throughLink(tar: Buffer, zeroMask: boolean): Promise<void> {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: 8 * 1024 * 1024 });
  await new Promise((r) => server.once("listening", r));
  const port = (server.address() as { port: number }).port;
  const received = new Promise<void>((resolve) => {
    server.once("connection", (socket) => {
      let got = 0;
      socket.on("message", (data: Buffer) => {
        got += data.length;
        if (got >= tar.length) resolve();
      });
    });
  });
  const client = new WebSocket(`ws://127.0.0.1:${port}`, {
    maxPayload: 8 * 1024 * 1024,
    ...(zeroMask ? { generateMask: (mask: Uint8Array) => void mask.fill(0) } : {}),
  });
  await new Promise((r) => client.once("open", r));
  try {
    for (const piece of pieces(tar)) {
      client.send(piece, { binary: true });
      while (client.bufferedAmount > 4 * 1024 * 1024) await new Promise((r) => setTimeout(r, 1));
    }
    await received;
  } finally {
    client.terminate();
    await new Promise((r) => server.close(r));
  }
}
const source = target("src");
let tarBytes = 0;
let gzBytes = 0;
const cleanup: string[] = [source.storage];
try {
  await docker.createVolume({ Name: source.storage, Labels: { [Labels.managedBy]: "agent-sessions" } });
  // The snapshot-bench workspace: each file TOTAL/FILES bytes, even ones random, odd ones text.
  const each = Math.floor(TOTAL / FILES);
  await run(
    `cd /workspace && i=0; while [ $i -lt ${FILES} ]; do d=d$((i % 10)); mkdir -p $d;
      if [ $((i % 2)) -eq 0 ]; then head -c ${each} /dev/urandom > $d/f$i.bin;
      else yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c ${each} > $d/f$i.bin; fi;
      i=$((i + 1)); done`,
    [{ Type: "volume", Source: source.storage, Target: "/workspace" }],
  );
  for (let i = 0; i < runs; i++) {
    let tar = Buffer.alloc(0);
    samples.read.push(
      await timed(async () => {
        const chunks: Buffer[] = [];
        for await (const chunk of await snapshots.read(source, 1024 * 1024 * 1024)) chunks.push(chunk);
        tar = Buffer.concat(chunks);
      }),
    );
    tarBytes = tar.length;
    const written = target(`w${i}`);
    cleanup.push(written.storage);
    samples.write.push(
      await timed(() =>
        snapshots.write(written, {
          size: tar.length,
          open: async function* () {
            for (let o = 0; o < tar.length; o += 1024 * 1024) yield tar.subarray(o, o + 1024 * 1024);
          },
        }),
      ),
    );
    const put = target(`p${i}`);
    cleanup.push(put.storage);
    samples.put.push(
      await timed(async () => {
        await docker.createVolume({ Name: put.storage, Labels: { [Labels.managedBy]: "agent-sessions" } });
        const c = await docker.createContainer({
          Image: image,
          Entrypoint: ["true"],
          User: "65532:65532",
          HostConfig: {
            NetworkMode: "none",
            Mounts: [{ Type: "volume", Source: put.storage, Target: "/volume" }],
          },
        });
        try {
          // Ownership as the tar says (copyUIDGID needs the user in the image's passwd, which 65532 is not).
          await c.putArchive(tar, { path: "/" });
        } finally {
          await c.remove({ force: true });
        }
      }),
    );
    samples.rewrite.push(
      await timed(async () => {
        const stats = { bytes: 0, fileBytes: 0, entries: 0 };
        for await (const _ of snapshotTarForExtract(
          (async function* () {
            yield* pieces(tar);
          })(),
          stats,
        ));
      }),
    );
    let gz: Buffer = Buffer.alloc(0);
    samples.gzip.push(await timed(async () => (gz = await exportGzip(tar))));
    gzBytes = gz.length;
    samples.gunzip.push(await timed(() => promisify(gunzip)(gz)));
    samples.linkMasked.push(await timed(() => throughLink(tar, false)));
    samples.linkZero.push(await timed(() => throughLink(tar, true)));
  }
} finally {
  for (const storage of cleanup)
    await docker
      .getVolume(storage)
      .remove()
      .catch(() => undefined);
}

const mbs = (ms: number) => `${(TOTAL / 1e6 / (ms / 1000)).toFixed(0)} MB/s`;
const row = (label: string, v: number[]) =>
  console.log(`| ${label} | ${Math.round(p50(v))} ms | ${mbs(p50(v))} | ${v.map(Math.round).join(", ")} |`);
console.log(
  `\nDocker: the floors of a snapshot's export and import, p50 of ${runs} runs; ${FILES} files, ${TOTAL / 1e6} MB (half random, half text); tar ${(tarBytes / 1e6).toFixed(1)} MB, the export's gzip ${(gzBytes / 1e6).toFixed(1)} MB`,
);
console.log("| step | p50 | MB/s of the snapshot | runs (ms) |");
console.log("|---|---|---|---|");
row("read (dockerd's archive, the runner's export path)", samples.read);
row("write (the runner's import: re-written, dockerd's extract)", samples.write);
row("put (dockerd's extract of the tar as it is)", samples.put);
row("re-write alone (the runner's CPU on an import)", samples.rewrite);
row("adaptive gzip (the export's CPU on the server)", samples.gzip);
row("gunzip (the import's CPU on the server)", samples.gunzip);
row("link, random mask (CPU of both ends)", samples.linkMasked);
row("link, zero mask (CPU of both ends)", samples.linkZero);
const pairs = (a: number[], b: number[]) => a.map((x, i) => x + (b[i] ?? 0));
row("read + write: the engine floor of export + import", pairs(samples.read, samples.write));
console.log(`\ncommand: node test/bench/snapshot-floor-bench.ts ${runs}`);
