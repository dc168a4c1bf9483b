/**
 * The runner's snapshot commands (runner/relay/snapshot-commands.ts) over the in-memory engine
 * (runner/engine/fake-driver.ts), and their consistency gate (runner/relay/snapshot-gate.ts):
 * relays that arrive during a take wait for it; those in flight are waited for up to `quiesce_ms`,
 * else ABORTED with nothing made.
 */
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { snapshotStorageName } from "../../contracts/session-snapshot.ts";
import type { SnapshotStorage } from "../../contracts/session-spec.ts";
import { FakeDriver } from "../engine/fake-driver.ts";
import { SnapshotCommands } from "./snapshot-commands.ts";
import { SnapshotGate } from "./snapshot-gate.ts";

type Of<K extends RunnerCommand["kind"]> = Extract<RunnerCommand, { kind: K }>;

const WORKSPACE = "as-team-alpha";
const target = (name: string): SnapshotStorage => ({
  storage: snapshotStorageName("team", name),
  namespace: "team",
  name,
});
const take = (name: string, quiesceMs = 1000): Of<"snapshot_take"> => ({
  kind: "snapshot_take",
  container_name: WORKSPACE,
  target: target(name),
  quiesce_ms: quiesceMs,
});

function setup() {
  const driver = new FakeDriver();
  driver.machine.volumes.set(`${WORKSPACE}-workspace`, new Map([["notes.md", "hello"]]));
  const gate = new SnapshotGate();
  const dir = mkdtempSync(join(tmpdir(), "snap-"));
  const commands = new SnapshotCommands(driver.snapshots, gate, dir);
  return { driver, gate, commands, dir };
}

/** Lets every pending promise callback run. */
const settle = () => new Promise((r) => setTimeout(r, 0));

describe("snapshot commands", () => {
  it("take copies the workspace's volume into the target and answers its size", async () => {
    const { driver, commands } = setup();
    expect(await commands.take(take("s1"))).toEqual({ size_bytes: 5 });
    expect(driver.machine.volumes.get(target("s1").storage)?.get("notes.md")).toBe("hello");
    await expect(commands.take(take("s1"))).rejects.toMatchObject({ code: "ALREADY_EXISTS" });
  });

  it("read streams the snapshot as base64 chunks ending with done; write of those bytes makes the same storage", async () => {
    const { driver, commands, dir } = setup();
    await commands.take(take("s1"));
    const chunks: { data: Buffer; done: boolean }[] = [];
    const sink = {
      chunk: (data: Buffer, done: boolean) => void chunks.push({ data, done }),
      buffered: () => 0,
    };
    const read = await commands.read(
      { kind: "snapshot_read", target: target("s1"), relay_id: "r1", max_bytes: 1e6 },
      sink,
    );
    expect(chunks.at(-1)).toEqual({ data: Buffer.alloc(0), done: true });
    const bytes = Buffer.concat(chunks.map((c) => c.data));
    expect(read).toEqual({ size: bytes.length });
    // Imported in two pieces.
    const piece = (seq: number, data: Buffer, done: boolean): Of<"snapshot_write"> => ({
      kind: "snapshot_write",
      target: target("s2"),
      upload_id: "upload-0001",
      seq,
      data: data.toString("base64"),
      done,
    });
    expect(await commands.write(piece(0, bytes.subarray(0, 4), false))).toEqual({ size: 4 });
    expect(driver.machine.volumes.has(target("s2").storage)).toBe(false);
    expect(await commands.write(piece(1, bytes.subarray(4), true))).toEqual({
      size: bytes.length,
      size_bytes: 5,
    });
    expect(driver.machine.volumes.get(target("s2").storage)?.get("notes.md")).toBe("hello");
    expect(readdirSync(dir)).toEqual([]); // the staging file is gone
  });

  it("takes pieces in flight (an upload window): staged in the order they came, each answered once written, the storage made by the last", async () => {
    const { driver, commands, dir } = setup();
    await commands.take(take("s1"));
    const chunks: Buffer[] = [];
    await commands.read(
      { kind: "snapshot_read", target: target("s1"), relay_id: "r1", max_bytes: 1e6 },
      { chunk: (data: Buffer) => void chunks.push(data), buffered: () => 0 },
    );
    const bytes = Buffer.concat(chunks);
    const n = bytes.length;
    const cut = [0, 1, Math.floor(n / 3), Math.floor((2 * n) / 3), n];
    // All sent before any is answered, as the link delivers them: in order, none awaited.
    const answers = cut.slice(1).map((end, seq) =>
      commands.write(
        {
          kind: "snapshot_write",
          target: target("s2"),
          upload_id: "upload-0003",
          seq,
          data: "",
          data_frame: true,
          done: end === bytes.length,
        },
        bytes.subarray(cut[seq], end),
      ),
    );
    const results = await Promise.all(answers);
    expect(results.slice(0, -1)).toEqual(cut.slice(1, -1).map((size) => ({ size })));
    expect(results.at(-1)).toEqual({ size: n, size_bytes: 5 });
    expect(driver.machine.volumes.get(target("s2").storage)?.get("notes.md")).toBe("hello");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("pieces in flight behind an abort: none is written after it, and nothing is made or left staged", async () => {
    const { driver, commands, dir } = setup();
    const piece = (seq: number, extra: Partial<Of<"snapshot_write">> = {}): Of<"snapshot_write"> => ({
      kind: "snapshot_write",
      target: target("s4"),
      upload_id: "upload-0004",
      seq,
      data: Buffer.from(`piece ${seq}`).toString("base64"),
      done: false,
      ...extra,
    });
    const [first, second, aborted, third] = await Promise.allSettled([
      commands.write(piece(0)),
      commands.write(piece(1)),
      commands.write(piece(2, { abort: true })),
      commands.write(piece(2)),
    ]);
    expect(first).toEqual({ status: "fulfilled", value: { size: 7 } });
    expect(second).toMatchObject({ status: "rejected", reason: { code: "ABORTED" } });
    expect(aborted).toEqual({ status: "fulfilled", value: { size: 0 } });
    expect(third).toMatchObject({ status: "rejected", reason: { code: "FAILED_PRECONDITION" } });
    await settle();
    expect(driver.machine.volumes.has(target("s4").storage)).toBe(false);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a read past max_bytes stops RESOURCE_EXHAUSTED; a piece out of order is FAILED_PRECONDITION and makes nothing", async () => {
    const { driver, commands } = setup();
    await commands.take(take("s1"));
    const sink = { chunk: () => {}, buffered: () => 0 };
    await expect(
      commands.read({ kind: "snapshot_read", target: target("s1"), relay_id: "r", max_bytes: 3 }, sink),
    ).rejects.toMatchObject({ code: "RESOURCE_EXHAUSTED" });
    await expect(
      commands.write({
        kind: "snapshot_write",
        target: target("s3"),
        upload_id: "upload-0002",
        seq: 1,
        data: "",
        done: true,
      }),
    ).rejects.toMatchObject({ code: "FAILED_PRECONDITION" });
    expect(driver.machine.volumes.has(target("s3").storage)).toBe(false);
  });

  it("restore needs the workload stopped (FAILED_PRECONDITION), then replaces the volume's files", async () => {
    const { driver, commands } = setup();
    await commands.take(take("s1"));
    driver.machine.volumes.get(`${WORKSPACE}-workspace`)?.set("later.md", "after");
    driver.machine.running.add(WORKSPACE);
    const restore: Of<"snapshot_restore"> = {
      kind: "snapshot_restore",
      container_name: WORKSPACE,
      source: target("s1"),
    };
    await expect(commands.restore(restore)).rejects.toMatchObject({ code: "FAILED_PRECONDITION" });
    driver.machine.running.delete(WORKSPACE);
    expect(await commands.restore(restore)).toEqual({});
    expect([...(driver.machine.volumes.get(`${WORKSPACE}-workspace`)?.keys() ?? [])]).toEqual(["notes.md"]);
  });

  it("restore_prepare changes nothing (an engine with nothing to ready answers it too), and the restore after it works", async () => {
    const { driver, commands } = setup();
    await commands.take(take("s1"));
    driver.machine.volumes.get(`${WORKSPACE}-workspace`)?.set("later.md", "after");
    driver.machine.running.add(WORKSPACE);
    const source = target("s1");
    expect(
      commands.prepareRestore({ kind: "snapshot_restore_prepare", container_name: WORKSPACE, source }),
    ).toEqual({});
    expect([...(driver.machine.volumes.get(`${WORKSPACE}-workspace`)?.keys() ?? [])].sort()).toEqual([
      "later.md",
      "notes.md",
    ]);
    driver.machine.running.delete(WORKSPACE);
    expect(await commands.restore({ kind: "snapshot_restore", container_name: WORKSPACE, source })).toEqual(
      {},
    );
    expect([...(driver.machine.volumes.get(`${WORKSPACE}-workspace`)?.keys() ?? [])]).toEqual(["notes.md"]);
  });

  it("delete frees the storage; a second delete answers deleted: false", async () => {
    const { driver, commands } = setup();
    await commands.take(take("s1"));
    expect(await commands.delete({ kind: "snapshot_delete", target: target("s1") })).toEqual({
      deleted: true,
    });
    expect(driver.machine.volumes.has(target("s1").storage)).toBe(false);
    expect(await commands.delete({ kind: "snapshot_delete", target: target("s1") })).toEqual({
      deleted: false,
    });
  });

  it("an engine without snapshots answers UNIMPLEMENTED", async () => {
    const commands = new SnapshotCommands(
      undefined,
      new SnapshotGate(),
      mkdtempSync(join(tmpdir(), "snap-")),
    );
    await expect(commands.take(take("s1"))).rejects.toMatchObject({ code: "UNIMPLEMENTED" });
    await expect(commands.delete({ kind: "snapshot_delete", target: target("s1") })).rejects.toMatchObject({
      code: "UNIMPLEMENTED",
    });
  });
});

describe("a snapshot's consistency (the quiesce gate)", () => {
  it("a relay arriving while the snapshot is taken waits until the copy is done", async () => {
    const { driver, gate, commands } = setup();
    let copy!: () => void;
    driver.snapshots.hold = new Promise((r) => {
      copy = r;
    });
    const taking = commands.take(take("s1"));
    await settle();
    expect(driver.snapshots.takes).toEqual([WORKSPACE]);
    let entered = false;
    const relay = gate.enter(WORKSPACE).then((leave) => {
      entered = true;
      return leave;
    });
    await settle();
    expect(entered).toBe(false);
    // Another workspace's relays do not wait.
    (await gate.enter("as-team-other"))();
    copy();
    await taking;
    (await relay)();
    expect(entered).toBe(true);
  });

  it("waits for the relays in flight to end, then copies", async () => {
    const { driver, gate, commands } = setup();
    const leave = await gate.enter(WORKSPACE);
    const taking = commands.take(take("s1", 5_000));
    await settle();
    expect(driver.snapshots.takes).toEqual([]); // not copied while a request is in flight
    leave();
    expect(await taking).toEqual({ size_bytes: 5 });
    expect(driver.snapshots.takes).toEqual([WORKSPACE]);
  });

  it("a relay still in flight after quiesce_ms: ABORTED with a clear message, nothing made, relays flow again", async () => {
    const { driver, gate, commands } = setup();
    const leave = await gate.enter(WORKSPACE);
    await expect(commands.take(take("s1", 30))).rejects.toMatchObject({
      code: "ABORTED",
      message: expect.stringMatching(/1 request in flight after 30 ms: no snapshot was taken/),
    });
    expect(driver.snapshots.takes).toEqual([]);
    expect(driver.machine.volumes.has(target("s1").storage)).toBe(false);
    // Not held any more: a new relay enters at once.
    (await gate.enter(WORKSPACE))();
    leave();
    expect(gate.inFlight(WORKSPACE)).toBe(0);
  });

  it("a relay waiting for a snapshot stops waiting when its own deadline aborts it", async () => {
    const { driver, gate, commands } = setup();
    driver.snapshots.hold = new Promise(() => {}); // a copy that never ends
    void commands.take(take("s1")).catch(() => {});
    await settle();
    const controller = new AbortController();
    const waiting = gate.enter(WORKSPACE, controller.signal);
    controller.abort(new Error("relay timed out"));
    await expect(waiting).rejects.toThrow("relay timed out");
    expect(gate.inFlight(WORKSPACE)).toBe(0);
  });

  it("a take whose command is cancelled while it waits for a relay in flight gives up: nothing made, relays flow again", async () => {
    const { driver, gate, commands } = setup();
    const leave = await gate.enter(WORKSPACE);
    const controller = new AbortController();
    const taking = commands.take(take("s1", 60_000), controller.signal);
    await settle();
    controller.abort(new Error("past its deadline"));
    await expect(taking).rejects.toThrow("past its deadline");
    expect(driver.snapshots.takes).toEqual([]);
    (await gate.enter(WORKSPACE))();
    leave();
    expect(gate.inFlight(WORKSPACE)).toBe(0);
  });

  it("a failed take releases the workspace: relays flow again", async () => {
    const { gate, commands } = setup();
    await commands.take(take("s1"));
    await expect(commands.take(take("s1"))).rejects.toMatchObject({ code: "ALREADY_EXISTS" });
    (await gate.enter(WORKSPACE))();
  });
});
