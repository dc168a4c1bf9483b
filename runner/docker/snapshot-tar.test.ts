/**
 * The re-writing of a snapshot's tar for dockerd's extract (runner/docker/snapshot-tar.ts): what
 * goes through is what a reader of the result sees (tar-stream's extract, the parser the server
 * uses), owned by 65532 with permission bits only, and only under `volume/`; what it refuses is
 * INVALID_ARGUMENT; the size is the regular files' bytes.
 */
import { Readable } from "node:stream";
import { extract, type Header, pack } from "tar-stream";
import { describe, expect, it } from "vitest";
import { type SnapshotTarStats, snapshotTarForExtract } from "./snapshot-tar.ts";

type Entry = Partial<Header> & Pick<Header, "name"> & { body?: string };

async function tarOf(entries: Entry[]): Promise<Buffer> {
  const p = pack();
  for (const { body, ...header } of entries) p.entry(header, body ?? "");
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of p as unknown as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** `tar` in pieces of `piece` bytes (to cross every boundary), re-written, then read back. */
async function rewrite(tar: Buffer, piece = 700) {
  const stats: SnapshotTarStats = { bytes: 0, fileBytes: 0, entries: 0 };
  const source = async function* () {
    for (let at = 0; at < tar.length; at += piece) yield tar.subarray(at, at + piece);
  };
  const out: Buffer[] = [];
  for await (const chunk of snapshotTarForExtract(source(), stats, new Date(1_000_000_000_000)))
    out.push(chunk);
  const reader = extract();
  const seen: {
    name: string;
    type: string;
    uid: number;
    gid: number;
    mode: number;
    body: string;
    pax?: unknown;
    linkname?: string | null;
    uname?: string;
  }[] = [];
  const done = (async () => {
    for await (const entry of reader) {
      const chunks: Buffer[] = [];
      for await (const c of entry) chunks.push(c as Buffer);
      const h = entry.header;
      seen.push({
        name: h.name,
        type: h.type ?? "",
        uid: h.uid ?? -1,
        gid: h.gid ?? -1,
        mode: h.mode ?? -1,
        body: Buffer.concat(chunks).toString(),
        ...(h.linkname ? { linkname: h.linkname } : {}),
        ...(h.uname ? { uname: h.uname } : {}),
        ...(h.pax && Object.keys(h.pax).length > 0 ? { pax: h.pax } : {}),
      });
    }
  })();
  Readable.from(out).pipe(reader);
  await done;
  return { seen, stats, bytes: Buffer.concat(out) };
}

const file = (name: string, body: string, extra: Partial<Header> = {}): Entry => ({
  name,
  type: "file",
  mode: 0o644,
  uid: 1000,
  gid: 1000,
  uname: "someone",
  gname: "them",
  body,
  size: Buffer.byteLength(body),
  ...extra,
});

describe("a snapshot tar re-written for dockerd's extract", () => {
  it("keeps the volume's entries, owned by 65532, permission bits only, a root added; counts the files' bytes", async () => {
    const tar = await tarOf([
      { name: "volume/", type: "directory", mode: 0o750, uid: 0, gid: 0 },
      { name: "volume/notes", type: "directory", mode: 0o755 },
      file("volume/notes/a.txt", "hello"),
      file("volume/run.sh", "#!/bin/sh\n", { mode: 0o4755 }),
      { name: "volume/link", type: "symlink", linkname: "notes/a.txt", uid: 0, gid: 0 },
      { name: "volume/again", type: "link", linkname: "volume/notes/a.txt" },
    ]);
    const { seen, stats } = await rewrite(tar);
    expect(seen.map((e) => [e.name, e.type, e.uid, e.gid, e.mode.toString(8)])).toEqual([
      ["volume/", "directory", 65532, 65532, "755"],
      ["volume/", "directory", 65532, 65532, "750"],
      ["volume/notes", "directory", 65532, 65532, "755"],
      ["volume/notes/a.txt", "file", 65532, 65532, "644"],
      ["volume/run.sh", "file", 65532, 65532, "755"],
      ["volume/link", "symlink", 65532, 65532, "644"],
      ["volume/again", "link", 65532, 65532, "644"],
    ]);
    expect(seen.find((e) => e.name === "volume/notes/a.txt")?.body).toBe("hello");
    expect(seen.some((e) => e.uname)).toBe(false);
    expect(seen.find((e) => e.name === "volume/link")?.linkname).toBe("notes/a.txt");
    expect(stats).toEqual({ bytes: tar.length, fileBytes: 15, entries: 6 });
  });

  it("drops what lies outside volume/ with its bytes; an archive of none of it is an empty volume", async () => {
    const big = "x".repeat(5000);
    const { seen, stats } = await rewrite(
      await tarOf([file("other/b.txt", big), file("volume/a.txt", "a"), file("volumex/c", "c")]),
      333,
    );
    expect(seen.map((e) => [e.name, e.body])).toEqual([
      ["volume/", ""],
      ["volume/a.txt", "a"],
    ]);
    expect(stats.fileBytes).toBe(1);
    const empty = await rewrite(await tarOf([file("other/b.txt", "b")]));
    expect(empty.seen.map((e) => e.name)).toEqual(["volume/"]);
    expect(empty.stats.fileBytes).toBe(0);
  });

  it("long names through pax keep their path; pax records other than path, linkpath, size and mtime go", async () => {
    const long = `volume/${"d".repeat(120)}/${"f".repeat(120)}.txt`;
    const { seen } = await rewrite(
      await tarOf([
        file(long, "deep", { pax: { "SCHILY.xattr.security.capability": "x", uid: "0" } }),
        file("volume/plain.txt", "p", { pax: { "SCHILY.xattr.user.a": "b" } }),
      ]),
    );
    const deep = seen.find((e) => e.name === long);
    expect(deep?.body).toBe("deep");
    expect(deep?.uid).toBe(65532);
    expect(deep?.pax).toEqual({ path: long });
    const plain = seen.find((e) => e.name === "volume/plain.txt");
    // tar-stream's pack writes the path beside the records it is given: the path stays, the xattr goes.
    expect(plain?.pax).toEqual({ path: "volume/plain.txt" });
  });

  it("refuses devices, FIFOs, a hard link out, `..`, a non-directory root, a bad checksum: INVALID_ARGUMENT", async () => {
    const refused = async (entries: Entry[]) => rewrite(await tarOf(entries));
    for (const entries of [
      [{ name: "volume/dev", type: "character-device" as const, devmajor: 1, devminor: 3 }],
      [{ name: "volume/fifo", type: "fifo" as const }],
      [{ name: "volume/h", type: "link" as const, linkname: "etc/passwd" }],
      [{ name: "volume/h", type: "link" as const, linkname: "volume/../x" }],
      [file("volume/../x", "x")],
      [file("volume", "x")],
    ])
      await expect(refused(entries)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    const tar = await tarOf([file("volume/a", "a")]);
    tar[0] = "w".charCodeAt(0);
    await expect(rewrite(tar)).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringContaining("checksum"),
    });
  });

  it("a tar cut short (inside an entry, or before its end blocks) fails; data after its end fails", async () => {
    const tar = await tarOf([file("volume/a", "a".repeat(2000))]);
    await expect(rewrite(tar.subarray(0, 1200))).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringContaining("cut short"),
    });
    const whole = tar.length - 1024;
    await expect(rewrite(tar.subarray(0, whole))).rejects.toMatchObject({
      message: expect.stringContaining("end-of-archive"),
    });
    const trailing = Buffer.concat([tar, Buffer.from("junk"), Buffer.alloc(508)]);
    await expect(rewrite(trailing)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    // One end block only, then the end of the stream: whole.
    expect((await rewrite(tar.subarray(0, tar.length - 512))).stats.fileBytes).toBe(2000);
  });
});
