/**
 * Snapshots on Docker at the driver level (issue 38, runner/docker/snapshots.ts), against the test
 * bed's real dockerd: a session volume holding nested directories, a symlink and a file of the
 * agent (uid 65532) with mode 0600 is taken into a snapshot volume that has the same files,
 * sizes, modes and owners and does not follow later changes; its tar has every entry under
 * `volume/` and writes back into a new storage the same; restore returns a changed volume to
 * it; remove leaves no volume; a provision with `seedSnapshot` starts its workload on the files,
 * once.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pack } from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Labels,
  type SessionSpec,
  SessionSpec as SessionSpecSchema,
  type SnapshotStorage,
  workloadName,
} from "../../contracts/session-spec.ts";
import { snapshotLabels, snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { DockerDriver } from "../../runner/docker/driver.ts";
import type { StackManager } from "../../stacks/index.ts";
import { dockerClient, dockerExec, stackManagerFor } from "../support/session-harness.ts";
import { expectNoStackDrift } from "../support/stack-drift.ts";
import { applyTestbedEnv, builtImage, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const suffix = randomBytes(3).toString("hex");
const namespace = "engine";
/** A session whose volume is made by hand (never provisioned): take, read, write, restore. */
const volumeSession = `snapv-${suffix}`;
const volumeContainer = workloadName(namespace, volumeSession);
/** A fork: provisioned for real with `seedSnapshot` (the fast create). */
const forkSession = `snapf-${suffix}`;
const forkContainer = workloadName(namespace, forkSession);
/** A fork provisioned through the stack's `up` (no fast path): the provider adopts the seeded volume. */
const upForkSession = `snapu-${suffix}`;
const upForkContainer = workloadName(namespace, upForkSession);
const dataDir = mkdtempSync(join(tmpdir(), "docker-snapshots-"));
const docker = dockerClient();
const gitImage = builtImage("base-image").image;
let stacks: StackManager;
let driver: DockerDriver;
let upDriver: DockerDriver;

function storage(name: string): SnapshotStorage {
  return {
    storage: snapshotStorageName(namespace, `${name}-${suffix}`),
    namespace,
    name: `${name}-${suffix}`,
  };
}
const taken = storage("taken");
const imported = storage("imported");

/** Runs `script` as the agent (65532) in a container of the git image with `volume` at /workspace. */
async function inVolume(volume: string, script: string, readOnly = false): Promise<string> {
  const container = await docker.createContainer({
    Image: gitImage,
    Entrypoint: ["/bin/sh", "-c", script],
    User: "65532:65532",
    HostConfig: {
      NetworkMode: "none",
      Mounts: [{ Type: "volume", Source: volume, Target: "/workspace", ReadOnly: readOnly }],
    },
  });
  try {
    const attached = await container.attach({ stream: true, stdout: true, stderr: true });
    const chunks: Buffer[] = [];
    attached.on("data", (c: Buffer) => chunks.push(c));
    await container.start();
    const { StatusCode } = (await container.wait()) as { StatusCode: number };
    const out = demux(Buffer.concat(chunks));
    if (StatusCode !== 0) throw new Error(`exit ${StatusCode}: ${out}`);
    return out;
  } finally {
    await container.remove({ force: true });
  }
}

function demux(buffer: Buffer): string {
  let out = "";
  for (let o = 0; o + 8 <= buffer.length; ) {
    const size = buffer.readUInt32BE(o + 4);
    out += buffer.subarray(o + 8, o + 8 + size).toString("utf8");
    o += 8 + size;
  }
  return out;
}

/** Every entry of a volume: path, type, size (files), mode, owner, link target; sorted. */
function listing(volume: string): Promise<string> {
  return inVolume(
    volume,
    "cd /workspace && find . -mindepth 1 \\( -type f -printf '%p f %m %U:%G size=%s\\n' \\) -o -printf '%p %y %m %U:%G %l\\n' | sort",
    true,
  );
}

async function volumeExists(name: string): Promise<boolean> {
  return docker
    .getVolume(name)
    .inspect()
    .then(
      () => true,
      () => false,
    );
}

const FILES = `set -e
cd /workspace
mkdir -p notes/deep/er
printf 'hello' > notes/deep/er/a.txt
head -c 3000 /dev/zero > notes/blob.bin
printf 'only mine' > secret && chmod 0600 secret
ln -s notes/deep/er/a.txt link
printf '{"turn":1}\\n' > conversation.jsonl`;
const FILES_BYTES = 5 + 3000 + 9 + 11;

function forkSpec(seed?: SnapshotStorage, name = forkSession): SessionSpec {
  return SessionSpecSchema.parse({
    namespace,
    name,
    engine: "docker",
    image: referenceImage().image,
    contract: "v1alpha2",
    env: { MODEL_BASE_URL: "http://10.213.0.1:11434/v1" },
    egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
    ...(seed ? { seedSnapshot: seed } : {}),
  });
}

/** What the driver warned of (a restore's sync that fell back to the full replace says so). */
const warnings: string[] = [];

beforeAll(async () => {
  ({ manager: stacks } = await stackManagerFor(join(dataDir, "runner")));
  driver = new DockerDriver(docker, stacks, {
    gitImage,
    log: (level, msg, fields) => {
      if (level !== "info") warnings.push(`${msg} ${JSON.stringify(fields)}`);
    },
  });
  upDriver = new DockerDriver(docker, stacks, { gitImage, fastPath: false });
  // A session's volume as its stack makes it (labelled), filled as its agent would.
  await docker.createVolume({
    Name: `${volumeContainer}-workspace`,
    Labels: {
      [Labels.managedBy]: "agent-sessions",
      [Labels.namespace]: namespace,
      [Labels.session]: volumeSession,
    },
  });
  await inVolume(`${volumeContainer}-workspace`, FILES);
});

afterAll(async () => {
  await driver?.remove(forkContainer).catch(() => undefined);
  await upDriver?.remove(upForkContainer).catch(() => undefined);
  for (const name of [`${volumeContainer}-workspace`, taken.storage, imported.storage])
    await docker
      .getVolume(name)
      .remove()
      .catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
});

describe("snapshots on Docker (real dockerd)", () => {
  let original: string;

  it("take copies the volume whole: the same entries, sizes, modes, owners and links; size is the files' bytes", async () => {
    original = await listing(`${volumeContainer}-workspace`);
    expect(original).toContain("./secret f 600 65532:65532");
    expect(original).toContain("./link l 777 65532:65532 notes/deep/er/a.txt");
    const { sizeBytes } = await driver.snapshots.take(volumeContainer, taken);
    expect(sizeBytes).toBe(FILES_BYTES);
    expect(await listing(taken.storage)).toBe(original);
    const labels = (await docker.getVolume(taken.storage).inspect()).Labels;
    expect(labels).toEqual(snapshotLabels(taken));
    // Its stack is recorded behind the answer, adopting the volume (the same one: files kept).
    await driver.snapshots.settled();
    expect(await stacks.snapshotExists(namespace, taken.name)).toBe(true);
    expect(await listing(taken.storage)).toBe(original);
    // The fork's agent (65532) can write what it inherits: the secret too.
    expect(await inVolume(taken.storage, "echo more >> /workspace/secret && cat /workspace/secret")).toBe(
      "only minemore\n",
    );
    await inVolume(taken.storage, "printf 'only mine' > /workspace/secret");
  });

  it("take refuses a storage that exists (ALREADY_EXISTS) and a workspace without a volume (NOT_FOUND)", async () => {
    await expect(driver.snapshots.take(volumeContainer, taken)).rejects.toMatchObject({
      code: "ALREADY_EXISTS",
    });
    await expect(driver.snapshots.take("as-engine-nothing-here", storage("none"))).rejects.toMatchObject({
      code: "NOT_FOUND",
    });
    expect(await volumeExists(storage("none").storage)).toBe(false);
  });

  it("a change to the session volume after the take does not change the snapshot", async () => {
    await inVolume(
      `${volumeContainer}-workspace`,
      "echo later > /workspace/later.txt && echo changed > /workspace/notes/deep/er/a.txt",
    );
    expect(await listing(taken.storage)).toBe(original);
    expect(await listing(`${volumeContainer}-workspace`)).toContain("./later.txt");
  });

  let archive: Buffer;

  it("read gives a tar whose every entry is under volume/, and stops past maxBytes (RESOURCE_EXHAUSTED)", async () => {
    const chunks: Buffer[] = [];
    for await (const chunk of await driver.snapshots.read(taken, 10 * 1024 * 1024)) chunks.push(chunk);
    archive = Buffer.concat(chunks);
    const names = execFileSync("tar", ["-tf", "-"], { input: archive, encoding: "utf8" }).trim().split("\n");
    expect(names.length).toBeGreaterThan(5);
    for (const name of names) expect(name.startsWith("volume/")).toBe(true);
    expect(names).toContain("volume/notes/deep/er/a.txt");
    expect(names).toContain("volume/link");
    const small = async () => {
      for await (const _ of await driver.snapshots.read(taken, 1000));
    };
    await expect(small()).rejects.toMatchObject({ code: "RESOURCE_EXHAUSTED" });
  });

  it("write of that tar into a new storage gives the same files", async () => {
    const { sizeBytes } = await driver.snapshots.write(imported, {
      size: archive.length,
      open: async function* () {
        yield archive.subarray(0, 1000);
        yield archive.subarray(1000);
      },
    });
    expect(sizeBytes).toBe(FILES_BYTES);
    expect(await listing(imported.storage)).toBe(original);
    await expect(
      driver.snapshots.write(imported, {
        size: archive.length,
        open: async function* () {
          yield archive;
        },
      }),
    ).rejects.toMatchObject({ code: "ALREADY_EXISTS" });
  });

  it("write takes only the entries under volume/; a tar without any makes an empty snapshot", async () => {
    const dir = mkdtempSync(join(tmpdir(), "snapshot-tar-"));
    try {
      execFileSync(
        "sh",
        ["-c", "mkdir -p volume/kept other && echo a > volume/kept/a.txt && echo b > other/b.txt"],
        {
          cwd: dir,
        },
      );
      const mixed = execFileSync("tar", ["-cf", "-", "volume", "other"], { cwd: dir });
      const onlyOther = execFileSync("tar", ["-cf", "-", "other"], { cwd: dir });
      const upload = (tar: Buffer) => ({
        size: tar.length,
        open: async function* () {
          yield tar;
        },
      });
      const a = storage("mixed");
      const b = storage("empty");
      try {
        expect(await driver.snapshots.write(a, upload(mixed))).toEqual({ sizeBytes: 2 });
        expect(await listing(a.storage)).toBe(
          "./kept d 755 65532:65532 \n./kept/a.txt f 644 65532:65532 size=2\n",
        );
        expect(await driver.snapshots.write(b, upload(onlyOther))).toEqual({ sizeBytes: 0 });
        expect(await listing(b.storage)).toBe("");
      } finally {
        await driver.snapshots.settled();
        await driver.snapshots.remove(a);
        await driver.snapshots.remove(b);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("write refuses a device, a hard link out of the volume and a tar cut short: INVALID_ARGUMENT, nothing left", async () => {
    const p = pack();
    p.entry({ name: "volume/", type: "directory" });
    p.entry({ name: "volume/null", type: "character-device", devmajor: 1, devminor: 3 });
    p.finalize();
    const chunks: Buffer[] = [];
    for await (const chunk of p as unknown as AsyncIterable<Buffer>) chunks.push(chunk);
    const device = Buffer.concat(chunks);
    const link = execFileSync(
      "sh",
      [
        "-c",
        "d=$(mktemp -d) && cd $d && mkdir volume && echo a > a && ln a volume/h && tar -cf - a volume/h && cd / && rm -rf $d",
      ],
      {},
    );
    const upload = (tar: Buffer) => ({
      size: tar.length,
      open: async function* () {
        yield tar;
      },
    });
    for (const [what, tar] of [
      ["a device", device],
      ["a hard link out", link],
      ["a tar cut short", archive.subarray(0, archive.length - 3000)],
    ] as const) {
      const target = storage(`refused-${what.replaceAll(" ", "-")}`);
      await expect(driver.snapshots.write(target, upload(tar)), what).rejects.toMatchObject({
        code: "INVALID_ARGUMENT",
      });
      expect(await volumeExists(target.storage), what).toBe(false);
    }
    await driver.snapshots.settled();
    const copies = await docker.listContainers({
      all: true,
      filters: JSON.stringify({ name: ["-snap-import-"] }),
    });
    expect(copies.filter((c) => c.Names.some((n) => n.includes(suffix)))).toEqual([]);
  });

  it("restore returns a changed session volume to the snapshot: what came after is gone", async () => {
    warnings.length = 0;
    await driver.snapshots.restore(volumeContainer, taken);
    const restored = await listing(`${volumeContainer}-workspace`);
    expect(restored).toBe(original);
    // By the sync (only what differs), not its fallback (runner/engine/volume-sync-script.ts).
    expect(warnings).toEqual([]);
    expect(restored).not.toContain("later.txt");
    expect(await inVolume(`${volumeContainer}-workspace`, "cat /workspace/notes/deep/er/a.txt", true)).toBe(
      "hello",
    );
  });

  it("a provision with seedSnapshot starts its workload on the snapshot's files, seeded once", async () => {
    const secrets = { credentials: { MODEL_API_KEY: `sk-${suffix}` }, adapterToken: `adapter-${suffix}` };
    const made = await driver.provision(forkContainer, forkSpec(taken), secrets);
    expect(made.seededSnapshot).toBe(taken.storage);
    const container = docker.getContainer(forkContainer);
    expect((await dockerExec(container, ["cat", "/workspace/notes/deep/er/a.txt"])).output).toBe("hello");
    expect(await listing(`${forkContainer}-workspace`)).toBe(original);
    // The fork diverges: a file written in it is absent from the snapshot.
    expect((await dockerExec(container, ["sh", "-c", "echo fork > /workspace/fork.txt"])).exitCode).toBe(0);
    expect(await listing(taken.storage)).toBe(original);
    // Restoring needs the workload stopped.
    await expect(driver.snapshots.restore(forkContainer, taken)).rejects.toMatchObject({
      code: "FAILED_PRECONDITION",
    });
    // A resume copies nothing again: the fork's own file is kept. With the seed still sent (the
    // server never took the first answer) the seed is said again; without it, not.
    const forkFile = async () =>
      (await dockerExec(docker.getContainer(forkContainer), ["cat", "/workspace/fork.txt"])).output;
    await driver.scaleDown(forkContainer);
    const resumed = await driver.provision(forkContainer, forkSpec(taken), secrets);
    expect(resumed.seededSnapshot).toBe(taken.storage);
    expect(await forkFile()).toBe("fork\n");
    await driver.scaleDown(forkContainer);
    const again = await driver.provision(forkContainer, forkSpec(), secrets);
    expect(again.seededSnapshot).toBeUndefined();
    expect(await forkFile()).toBe("fork\n");
  });

  it("through the stack's up (no fast path) too: the provider adopts the seeded volume, the stack declares it", async () => {
    const secrets = { credentials: { MODEL_API_KEY: `sk-${suffix}` }, adapterToken: `adapter-${suffix}` };
    const made = await upDriver.provision(upForkContainer, forkSpec(taken, upForkSession), secrets);
    expect(made.seededSnapshot).toBe(taken.storage);
    expect(await stacks.exists(namespace, upForkSession)).toBe(true);
    const container = docker.getContainer(upForkContainer);
    expect((await dockerExec(container, ["cat", "/workspace/notes/deep/er/a.txt"])).output).toBe("hello");
    expect(await listing(`${upForkContainer}-workspace`)).toBe(original);
    // The stack holds the volume it adopted as declared: a refreshed preview proposes nothing.
    await expectNoStackDrift(stacks.stackName(namespace, upForkSession), dataDir, "a fork's up");
  });

  it("remove leaves no volume; a second remove finds nothing", async () => {
    await driver.snapshots.settled();
    expect(await stacks.snapshotExists(namespace, imported.name)).toBe(true);
    expect(await driver.snapshots.remove(taken)).toBe(true);
    expect(await stacks.snapshotExists(namespace, taken.name)).toBe(false);
    expect(await driver.snapshots.remove(imported)).toBe(true);
    expect(await stacks.snapshotExists(namespace, imported.name)).toBe(false);
    expect(await volumeExists(taken.storage)).toBe(false);
    expect(await volumeExists(imported.storage)).toBe(false);
    expect(await driver.snapshots.remove(taken)).toBe(false);
    // No copy container is left behind, whatever happened to it.
    const copies = await docker.listContainers({ all: true, filters: JSON.stringify({ name: [`-snap-`] }) });
    expect(copies.filter((c) => c.Names.some((n) => n.includes(suffix)))).toEqual([]);
  });
});
