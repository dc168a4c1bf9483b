import { Readable, Transform, type TransformCallback, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { extract, type Header, pack } from "tar-stream";
import { CodedError } from "../../contracts/errors.ts";
import {
  SNAPSHOT_ARCHIVE_MANIFEST,
  SNAPSHOT_ARCHIVE_ROOT,
  SnapshotManifest,
} from "../../contracts/session-snapshot.ts";

/** A manifest larger than this is refused (it is a few hundred bytes). */
const MANIFEST_MAX_BYTES = 64 * 1024;

/**
 * The tar entry `manifest.json` (a ustar header, the JSON, padding to 512 bytes), written here so
 * the archive's first entry is ours and the runner's tar (`snapshot_read`) follows it unchanged:
 * a tar is a sequence of entries, and the runner's end-of-archive blocks end the whole.
 */
export function manifestEntry(manifest: SnapshotManifest, mtime = new Date()): Buffer {
  const body = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
  const header = Buffer.alloc(512);
  const field = (offset: number, length: number, value: string) =>
    header.write(value, offset, length, "ascii");
  const octal = (offset: number, length: number, value: number) =>
    field(offset, length, `${value.toString(8).padStart(length - 1, "0")}\0`);
  field(0, 100, SNAPSHOT_ARCHIVE_MANIFEST);
  octal(100, 8, 0o644);
  octal(108, 8, 0);
  octal(116, 8, 0);
  octal(124, 12, body.length);
  octal(136, 12, Math.floor(mtime.getTime() / 1000));
  header.fill(0x20, 148, 156); // the checksum is computed with its own field as spaces
  field(156, 1, "0");
  field(257, 6, "ustar\0");
  field(263, 2, "00");
  let sum = 0;
  for (const byte of header) sum += byte;
  field(148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  const padding = Buffer.alloc((512 - (body.length % 512)) % 512);
  return Buffer.concat([header, body, padding]);
}

/** What an imported archive held: its manifest, its bytes uncompressed and its entries (the manifest aside). */
export type StagedArchive = { manifest: SnapshotManifest; bytes: number; entries: number };

/**
 * Reads an uploaded snapshot archive (gzip tar, contracts/session-snapshot.ts) and writes what the
 * runner will extract into `sink` as it goes: a tar re-written from the checked entries only,
 * every one under `volume/`, modes without setuid/setgid/sticky bits. `sink` must not make
 * anything of it before this resolves (snapshot-transfer.ts `SnapshotUpload` holds its last piece
 * back); when this throws, what it got is to be dropped. Everything is checked before anything
 * is made: the first entry is a valid `manifest.json`; every other entry is a regular file, a
 * directory or a symlink under `volume/`, with no `..` and no absolute path, a symlink's target
 * staying inside the volume; no hard link, device, FIFO or second manifest; the archive whole
 * (not truncated), at most `maxBytes` compressed and at most `maxBytes` once uncompressed.
 * Bad input is INVALID_ARGUMENT, too large RESOURCE_EXHAUSTED, each naming the entry.
 * tar-stream parses it (a maintained parser for untrusted input, not ours).
 */
export async function stageSnapshotArchive(
  body: ReadableStream<Uint8Array> | null,
  options: { maxBytes: number; sink: Writable },
): Promise<StagedArchive> {
  if (!body) throw invalid("the request has no body: send the snapshot archive (a gzip-compressed tar)");
  const { maxBytes } = options;
  const compressed = byteLimit(maxBytes, "the archive");
  const uncompressed = byteLimit(maxBytes, "the archive once uncompressed");
  const reader = extract();
  const out = pack();
  // A failure is told through the pipelines and the iteration below; these listeners only keep a
  // late one (tar-stream errors the extract at its end when the tar is cut short, possibly after
  // the pipeline settled) from being an uncaught exception that ends the server.
  let late: unknown;
  reader.on("error", (error: unknown) => {
    late ??= error;
  });
  out.on("error", (error: unknown) => {
    late ??= error;
  });
  const written = options.sink;
  // The sink's own failure (the runner refused a piece) is told as it is.
  let sinkFailure: unknown;
  const writing = pipeline(out as unknown as Readable, written).catch((error: unknown) => {
    sinkFailure ??= error;
    throw error;
  });
  writing.catch(() => undefined);
  // An entry being written waits no longer once the sink failed (it would wait for ever).
  const sinkFailed = writing.then(
    () => new Promise<never>(() => {}),
    (error: unknown) => Promise.reject(error),
  );
  sinkFailed.catch(() => undefined);
  let manifest: SnapshotManifest | undefined;
  let entries = 0;
  const parsing = pipeline(
    Readable.fromWeb(body as import("node:stream/web").ReadableStream<Uint8Array>),
    compressed,
    createGunzip(),
    uncompressed,
    reader as unknown as NodeJS.WritableStream,
  );
  // The pipeline's own failure (gunzip, a limit) is the one told; the iteration's is then secondary.
  let failure: unknown;
  const parsed = parsing.catch((error: unknown) => {
    failure ??= error;
  });
  try {
    for await (const entry of reader) {
      const header = entry.header;
      if (manifest === undefined) {
        manifest = await readManifest(header, entry);
        continue;
      }
      const name = checkedName(header);
      entries += 1;
      const copied = new Promise<void>((resolve, reject) => {
        const sink = out.entry(
          {
            name,
            type: header.type,
            mode: header.mode & 0o777,
            mtime: header.mtime,
            ...(header.type === "file" ? { size: header.size } : {}),
            ...(header.type === "symlink" ? { linkname: header.linkname } : {}),
          },
          (error) => (error ? reject(error) : resolve()),
        );
        entry.on("error", reject);
        // A cut-short entry destroys the sink it pipes into with its error: told here, not uncaught.
        sink.on("error", reject);
        entry.pipe(sink);
      });
      await Promise.race([copied, sinkFailed]);
    }
    await parsed;
    failure ??= late;
    if (failure !== undefined) throw failure;
    if (manifest === undefined)
      throw invalid(`the archive is empty: its first entry must be ${SNAPSHOT_ARCHIVE_MANIFEST}`);
    out.finalize();
    await writing;
    return { manifest, bytes: uncompressed.bytes, entries };
  } catch (error) {
    await parsed;
    failure ??= late;
    out.destroy();
    written.destroy();
    await writing.catch(() => undefined);
    // A check of ours failed (the pipeline then only says "premature close"), else the pipeline's own.
    const coded = (e: unknown) => (e as { name?: string } | undefined)?.name === "CodedError";
    if (coded(sinkFailure)) throw sinkFailure;
    throw asArchiveError(coded(error) ? error : coded(failure) ? failure : (failure ?? error));
  }
}

async function readManifest(header: Header, entry: AsyncIterable<unknown>): Promise<SnapshotManifest> {
  if (header.name !== SNAPSHOT_ARCHIVE_MANIFEST || header.type !== "file")
    throw invalid(
      `the archive's first entry must be the file ${SNAPSHOT_ARCHIVE_MANIFEST}, not ${header.type} ${JSON.stringify(header.name)}`,
    );
  if (header.size > MANIFEST_MAX_BYTES)
    throw invalid(`${SNAPSHOT_ARCHIVE_MANIFEST} is ${header.size} bytes; at most ${MANIFEST_MAX_BYTES}`);
  const chunks: Buffer[] = [];
  for await (const chunk of entry) chunks.push(Buffer.from(chunk as Uint8Array));
  let json: unknown;
  try {
    json = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw invalid(`${SNAPSHOT_ARCHIVE_MANIFEST} is not JSON`);
  }
  const parsed = SnapshotManifest.safeParse(json);
  if (!parsed.success)
    throw invalid(
      `${SNAPSHOT_ARCHIVE_MANIFEST} is not a snapshot manifest: ${parsed.error.issues
        .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
        .join("; ")}`,
    );
  return parsed.data;
}

/** The entry's name, if it may be extracted into the volume; else INVALID_ARGUMENT naming it. */
function checkedName(header: Header): string {
  const name = header.name;
  const shown = JSON.stringify(name);
  if (name === SNAPSHOT_ARCHIVE_MANIFEST) throw invalid(`a second ${SNAPSHOT_ARCHIVE_MANIFEST}`);
  if (header.type !== "file" && header.type !== "directory" && header.type !== "symlink")
    throw invalid(
      `entry ${shown} is a ${header.type}: only regular files, directories and symlinks can be imported (no hard links, devices or FIFOs)`,
    );
  if (name.startsWith("/")) throw invalid(`entry ${shown} has an absolute path`);
  if (name.includes("\0")) throw invalid(`entry ${shown} has a NUL in its name`);
  const segments = name.split("/");
  if (segments.includes("..")) throw invalid(`entry ${shown} climbs out with ".."`);
  const root = SNAPSHOT_ARCHIVE_ROOT.slice(0, -1);
  if (segments[0] !== root)
    throw invalid(
      `entry ${shown} is outside ${SNAPSHOT_ARCHIVE_ROOT}: every file of a snapshot lies under it`,
    );
  if (segments.filter((x) => x !== "" && x !== ".").length === 1 && header.type !== "directory")
    throw invalid(
      `entry ${shown} is a ${header.type}: ${SNAPSHOT_ARCHIVE_ROOT} itself can only be a directory`,
    );
  if (header.type === "symlink") {
    const target = header.linkname ?? "";
    if (target === "" || target.startsWith("/"))
      throw invalid(
        `symlink ${shown} points to ${JSON.stringify(target)}: a snapshot's symlinks must be relative and stay inside the volume`,
      );
    // Resolved from the link's directory inside the volume: it must not leave it.
    const inside = segments.slice(1).filter((s) => s !== "" && s !== ".");
    if (!staysInside(inside.slice(0, -1), target))
      throw invalid(`symlink ${shown} points out of the volume (${JSON.stringify(target)})`);
  }
  return name;
}

/** Whether `target`, followed from directory `dir` (segments below the volume root), stays inside. */
function staysInside(dir: string[], target: string): boolean {
  const stack = [...dir];
  for (const part of target.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (stack.length === 0) return false;
      stack.pop();
    } else stack.push(part);
  }
  return true;
}

/** Counts bytes through; past `max` the stream fails with RESOURCE_EXHAUSTED naming `what`. */
function byteLimit(max: number, what: string): Transform & { bytes: number } {
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, callback: TransformCallback) {
      counter.bytes += chunk.length;
      if (counter.bytes > max)
        callback(
          new CodedError(
            "RESOURCE_EXHAUSTED",
            `${what} exceeds ${max} bytes (AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES)`,
            {
              limit_bytes: max,
            },
          ),
        );
      else callback(null, chunk);
    },
  }) as Transform & { bytes: number };
  counter.bytes = 0;
  return counter;
}

function invalid(message: string): CodedError {
  return new CodedError("INVALID_ARGUMENT", `invalid snapshot archive: ${message}`);
}

/** A parser's or gunzip's failure as a client error: the archive is broken or cut short. */
function asArchiveError(error: unknown): CodedError {
  if ((error as { name?: string }).name === "CodedError") return error as CodedError;
  const message = String((error as Error).message ?? error);
  if (/unexpected end|end of data|truncat/i.test(message))
    return invalid(`it is truncated (${message}): send the whole gzip-compressed tar`);
  return invalid(`it is not a whole gzip-compressed tar (${message})`);
}
