/**
 * A snapshot's tar made ready for dockerd's own extract (`PUT /containers/{id}/archive`,
 * runner/docker/snapshots.ts `write`), as a stream, never buffered whole. dockerd extracts as
 * root and keeps what the headers say, so every entry it is given is re-written first:
 *
 * - only the entries under `volume/` go through (the others are dropped with their bytes, as the
 *   `tar --wildcards 'volume/*'` of the stdin path did); a leading `volume/` directory is added,
 *   so the volume's root is the agent's even when the archive holds no entry for it;
 * - owner 65532:65532 (the agent, as `tar --no-same-owner` run as 65532 made them), user and
 *   group names cleared, modes without setuid, setgid and sticky bits;
 * - pax records only `path`, `linkpath`, `size` and `mtime` (no xattrs, no owners); no global pax
 *   header;
 * - regular files, directories, symlinks and hard links to entries under `volume/` only (no
 *   devices, FIFOs or sparse files), no `..` in a name; a directory's or link's size 0 (no body
 *   that another reader could take for headers);
 * - header checksums checked; the archive whole: cut short (inside an entry or before its end
 *   blocks), it fails, so dockerd is never told it ended well.
 *
 * The server has checked an imported archive already (proxy/harness/snapshot-archive.ts); these
 * checks are the runner's own, for a tar whatever its source, and cost a pass over the headers.
 * Failures are INVALID_ARGUMENT naming the entry. `stats` counts the bytes read and the regular
 * files' sizes (the snapshot's size, as `find -printf %s` summed it).
 */
import { CodedError } from "../../contracts/errors.ts";

const BLOCK = 512;
/** The agent's uid and gid, owner of every imported entry. */
export const SNAPSHOT_OWNER = 65532;
/** A pax or GNU long-name body larger than this is refused (a name is at most a few KiB). */
const META_MAX_BYTES = 64 * 1024;
/** Output is handed on in pieces of about this many bytes (fewer, larger writes to dockerd). */
const OUT_BYTES = 1024 * 1024;
const ROOT = "volume";
const KEPT_PAX = new Set(["path", "linkpath", "size", "mtime"]);

export type SnapshotTarStats = {
  /** Bytes read from the source. */
  bytes: number;
  /** The sum of the regular files' sizes. */
  fileBytes: number;
  /** Entries passed on (the added root aside). */
  entries: number;
};

/** Pulls exact byte counts, or pieces without copying, out of an async iterable of buffers. */
class Reader {
  readonly #source: AsyncIterator<Uint8Array>;
  #head: Buffer = Buffer.alloc(0);
  bytes = 0;
  constructor(source: AsyncIterable<Uint8Array>) {
    this.#source = source[Symbol.asyncIterator]();
  }
  async #more(): Promise<boolean> {
    const next = await this.#source.next();
    if (next.done) return false;
    const value = next.value;
    const chunk = Buffer.isBuffer(value)
      ? value
      : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    this.bytes += chunk.length;
    this.#head = this.#head.length === 0 ? chunk : Buffer.concat([this.#head, chunk]);
    return true;
  }
  /** A copy of exactly `n` bytes; undefined at a clean end of the source; throws when it ends inside them. */
  async exact(n: number, what: string): Promise<Buffer | undefined> {
    while (this.#head.length < n)
      if (!(await this.#more())) {
        if (this.#head.length === 0) return undefined;
        throw cutShort(what);
      }
    const out = Buffer.from(this.#head.subarray(0, n));
    this.#head = this.#head.subarray(n);
    return out;
  }
  /** The next `n` bytes as they come (views, not copies). */
  async *pass(n: number, what: string): AsyncGenerator<Buffer> {
    while (n > 0) {
      if (this.#head.length === 0 && !(await this.#more())) throw cutShort(what);
      const part = this.#head.subarray(0, n);
      this.#head = this.#head.subarray(part.length);
      n -= part.length;
      yield part;
    }
  }
  async return(): Promise<void> {
    await this.#source.return?.();
  }
}

/** The tar `source` re-written for dockerd's extract (module doc); throws INVALID_ARGUMENT on what it refuses. */
export async function* snapshotTarForExtract(
  source: AsyncIterable<Uint8Array>,
  stats: SnapshotTarStats,
  now = new Date(),
): AsyncGenerator<Buffer> {
  const reader = new Reader(source);
  let out: Buffer[] = [];
  let outBytes = 0;
  const put = (b: Buffer) => {
    out.push(b);
    outBytes += b.length;
  };
  const take = () => {
    const all = out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out);
    out = [];
    outBytes = 0;
    return all;
  };
  put(
    ustarHeader({
      name: `${ROOT}/`,
      flag: "5",
      size: 0,
      mode: 0o755,
      mtime: Math.floor(now.getTime() / 1000),
    }),
  );
  let pax: Map<string, string> | undefined;
  let longName: string | undefined;
  let longLink: string | undefined;
  /** GNU long-name entries read for the next entry, passed on with it when it is kept. */
  let longEntries: Buffer[] = [];
  try {
    for (;;) {
      const block = await reader.exact(BLOCK, "a header");
      if (!block) throw cutShort("its end-of-archive blocks");
      if (block.every((x) => x === 0)) {
        // The end: what follows may be only zeros (a second end block, padding to a record).
        for (;;) {
          const rest = await reader.exact(BLOCK, "its end-of-archive blocks");
          if (!rest) break;
          if (!rest.every((x) => x === 0)) throw invalid("it holds data after its end-of-archive block");
        }
        put(Buffer.alloc(BLOCK * 2));
        stats.bytes = reader.bytes;
        yield take();
        return;
      }
      checkChecksum(block);
      const magic = block.toString("latin1", 257, 263);
      if (magic !== "ustar\0" && magic !== "ustar ")
        throw invalid("a header is neither ustar, pax nor GNU tar");
      const posix = magic === "ustar\0";
      const flag = String.fromCharCode(block[156] ?? 0);
      const headerSize = numeric(block, 124, 12);
      if (flag === "x" || flag === "L" || flag === "K") {
        if (headerSize > META_MAX_BYTES)
          throw invalid(`an extended header of ${headerSize} bytes (at most ${META_MAX_BYTES})`);
        const body = await reader.exact(headerSize + padding(headerSize), "an extended header");
        if (!body) throw cutShort("an extended header");
        const content = body.subarray(0, headerSize);
        if (flag === "x") pax = new Map([...(pax ?? []), ...paxRecords(content)]);
        else {
          const value = cString(content, 0, content.length);
          if (flag === "L") longName = value;
          else longLink = value;
          longEntries.push(block, body);
        }
        continue;
      }
      if (flag === "g") throw invalid("a global pax header (not taken)");
      const prefix = posix ? cString(block, 345, 155) : "";
      const field = cString(block, 0, 100);
      const name = pax?.get("path") ?? longName ?? (prefix ? `${prefix}/${field}` : field);
      const linkname = pax?.get("linkpath") ?? longLink ?? cString(block, 157, 100);
      const paxSize = pax?.get("size");
      const size = paxSize === undefined ? headerSize : paxNumber(paxSize, "size");
      const headerOnly = "123456".includes(flag) && flag !== "";
      const described = { pax, longEntries };
      pax = undefined;
      longName = undefined;
      longLink = undefined;
      longEntries = [];
      const segments = name.split("/");
      const inside = segments[0] === ROOT;
      const dataBytes = headerOnly ? 0 : size;
      if (!inside) {
        // Not part of the snapshot: dropped with its bytes.
        for await (const _ of reader.pass(dataBytes + padding(dataBytes), `entry ${JSON.stringify(name)}`));
        continue;
      }
      const shown = JSON.stringify(name);
      if (segments.includes("..")) throw invalid(`entry ${shown} climbs out with ".."`);
      if (name.includes("\0")) throw invalid(`entry ${shown} has a NUL in its name`);
      const file = flag === "0" || flag === "\0" || flag === "7";
      if (!file && flag !== "5" && flag !== "2" && flag !== "1")
        throw invalid(
          `entry ${shown} is of type ${JSON.stringify(flag)}: only regular files, directories, symlinks and hard links can be imported`,
        );
      if (!file && size !== 0) throw invalid(`entry ${shown} is not a regular file but has ${size} bytes`);
      if (flag === "1") {
        const target = linkname.split("/");
        if (target[0] !== ROOT || target.includes(".."))
          throw invalid(`hard link ${shown} points out of the volume (${JSON.stringify(linkname)})`);
      }
      if (segments.filter((s) => s !== "" && s !== ".").length === 1 && flag !== "5")
        throw invalid(`entry ${shown}: ${ROOT}/ itself can only be a directory`);
      if (described.pax) {
        const kept = [...described.pax].filter(([key]) => KEPT_PAX.has(key));
        if (kept.length > 0) put(paxEntry(kept, Math.floor(now.getTime() / 1000)));
      }
      for (const b of described.longEntries) put(b);
      put(owned(block));
      stats.entries += 1;
      if (file) stats.fileBytes += size;
      for await (const part of reader.pass(dataBytes + padding(dataBytes), `entry ${shown}`)) {
        put(part);
        if (outBytes >= OUT_BYTES) yield take();
      }
      if (outBytes >= OUT_BYTES) yield take();
    }
  } finally {
    stats.bytes = reader.bytes;
    await reader.return();
  }
}

/** `block` with the agent as owner, no user or group names, a mode of permission bits only, its checksum anew. */
function owned(block: Buffer): Buffer {
  const mode = numeric(block, 100, 8) & 0o777;
  octalField(block, 100, 8, mode);
  octalField(block, 108, 8, SNAPSHOT_OWNER);
  octalField(block, 116, 8, SNAPSHOT_OWNER);
  block.fill(0, 265, 329);
  setChecksum(block);
  return block;
}

function ustarHeader(e: { name: string; flag: string; size: number; mode: number; mtime: number }): Buffer {
  const b = Buffer.alloc(BLOCK);
  b.write(e.name, 0, 100, "utf8");
  octalField(b, 100, 8, e.mode);
  octalField(b, 108, 8, SNAPSHOT_OWNER);
  octalField(b, 116, 8, SNAPSHOT_OWNER);
  octalField(b, 124, 12, e.size);
  octalField(b, 136, 12, e.mtime);
  b.write(e.flag, 156, 1, "latin1");
  b.write("ustar\0", 257, 6, "latin1");
  b.write("00", 263, 2, "latin1");
  setChecksum(b);
  return b;
}

/** A pax extended header holding `records`, with its body and padding. */
function paxEntry(records: [string, string][], mtime: number): Buffer {
  const body = Buffer.concat(records.map(([key, value]) => paxRecord(key, value)));
  return Buffer.concat([
    ustarHeader({ name: "PaxHeader", flag: "x", size: body.length, mode: 0o644, mtime }),
    body,
    Buffer.alloc(padding(body.length)),
  ]);
}

function paxRecord(key: string, value: string): Buffer {
  const rest = Buffer.byteLength(` ${key}=${value}\n`);
  let length = rest + 1;
  while (String(length).length + rest !== length) length = String(length).length + rest;
  return Buffer.from(`${length} ${key}=${value}\n`);
}

/** A pax body's records, strictly: `<length> <key>=<value>\n` each. */
function paxRecords(body: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let at = 0;
  while (at < body.length) {
    const space = body.indexOf(0x20, at);
    const digits = space === -1 ? "" : body.toString("latin1", at, space);
    const length = /^[1-9][0-9]{0,6}$/.test(digits) ? Number(digits) : Number.NaN;
    if (!(length > 0) || at + length > body.length || body[at + length - 1] !== 0x0a)
      throw invalid("a pax extended header is malformed");
    const record = body.toString("utf8", space + 1, at + length - 1);
    const eq = record.indexOf("=");
    if (eq <= 0) throw invalid("a pax extended header is malformed");
    out.set(record.slice(0, eq), record.slice(eq + 1));
    at += length;
  }
  return out;
}

function paxNumber(value: string, key: string): number {
  if (!/^[0-9]{1,15}$/.test(value)) throw invalid(`a pax ${key} of ${JSON.stringify(value.slice(0, 40))}`);
  return Number(value);
}

function cString(b: Buffer, start: number, length: number): string {
  const field = b.subarray(start, start + length);
  const nul = field.indexOf(0);
  return field.subarray(0, nul === -1 ? field.length : nul).toString("utf8");
}

/** An octal (or GNU base-256) number field. */
function numeric(b: Buffer, start: number, length: number): number {
  const field = b.subarray(start, start + length);
  if (((field[0] ?? 0) & 0x80) !== 0) {
    let n = (field[0] ?? 0) & 0x7f;
    for (let i = 1; i < field.length; i++) n = n * 256 + (field[i] ?? 0);
    if (!Number.isSafeInteger(n)) throw invalid("a header holds a number too large");
    return n;
  }
  const text = field
    .toString("latin1")
    .replace(/[\0 ]+$/, "")
    .replace(/^ +/, "");
  if (text === "") return 0;
  if (!/^[0-7]{1,12}$/.test(text)) throw invalid("a header holds a number that is not octal");
  return Number.parseInt(text, 8);
}

function octalField(b: Buffer, start: number, length: number, value: number): void {
  b.write(`${value.toString(8).padStart(length - 1, "0")}\0`, start, length, "latin1");
}

function checksums(block: Buffer): { unsigned: number; signed: number } {
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : (block[i] as number);
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  return { unsigned, signed };
}

function checkChecksum(block: Buffer): void {
  const stored = numeric(block, 148, 8);
  const { unsigned, signed } = checksums(block);
  if (stored !== unsigned && stored !== signed) throw invalid("a header's checksum is wrong");
}

function setChecksum(block: Buffer): void {
  block.write(`${checksums(block).unsigned.toString(8).padStart(6, "0")}\0 `, 148, 8, "latin1");
}

const padding = (size: number) => (BLOCK - (size % BLOCK)) % BLOCK;

function invalid(message: string): CodedError {
  return new CodedError("INVALID_ARGUMENT", `invalid snapshot tar: ${message}`);
}

function cutShort(what: string): CodedError {
  return invalid(`it is cut short (it ends inside ${what})`);
}
