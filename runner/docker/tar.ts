/**
 * The little of tar the workspace files API needs (runner/docker/workspace-files.ts): read the entries
 * of a stream (ustar, GNU long names, pax `path`/`linkpath`/`size`) without buffering bodies, and
 * write a stream of directories plus one file. Anything else in an archive is passed over.
 */

const BLOCK = 512;

export type TarEntryType = "file" | "dir" | "symlink" | "other";

export type TarHeader = {
  name: string;
  type: TarEntryType;
  size: number;
  mode: number;
  /** Seconds since the epoch. */
  mtime: number;
  linkname: string;
};

/** Pulls exact byte counts out of an async iterable of buffers. */
class ByteQueue {
  readonly #source: AsyncIterator<Buffer | Uint8Array | string>;
  #chunks: Buffer[] = [];
  #length = 0;
  #ended = false;
  constructor(source: AsyncIterable<Buffer | Uint8Array | string>) {
    this.#source = source[Symbol.asyncIterator]();
  }
  async #fill(n: number): Promise<boolean> {
    while (this.#length < n && !this.#ended) {
      const next = await this.#source.next();
      if (next.done) this.#ended = true;
      else {
        const b = Buffer.isBuffer(next.value) ? next.value : Buffer.from(next.value);
        this.#chunks.push(b);
        this.#length += b.length;
      }
    }
    return this.#length >= n;
  }
  /** Exactly `n` bytes, or undefined at the end of the stream. */
  async take(n: number): Promise<Buffer | undefined> {
    if (!(await this.#fill(n))) return undefined;
    const all = Buffer.concat(this.#chunks);
    this.#chunks = all.length > n ? [all.subarray(n)] : [];
    this.#length = all.length - n;
    return all.subarray(0, n);
  }
  /** Up to `max` bytes (at least one unless the stream ended). */
  async some(max: number): Promise<Buffer | undefined> {
    if (!(await this.#fill(1))) return undefined;
    return this.take(Math.min(max, this.#length));
  }
  async return(): Promise<void> {
    await this.#source.return?.();
  }
}

function text(b: Buffer, start: number, length: number): string {
  const field = b.subarray(start, start + length);
  const nul = field.indexOf(0);
  return field.subarray(0, nul === -1 ? field.length : nul).toString("utf8");
}

function octal(b: Buffer, start: number, length: number): number {
  const field = b.subarray(start, start + length);
  if ((field[0] ?? 0) & 0x80) {
    // base-256 (GNU) for big numbers
    let n = 0;
    for (let i = 1; i < field.length; i++) n = n * 256 + (field[i] ?? 0);
    return n;
  }
  const s = text(b, start, length).trim();
  return s === "" ? 0 : Number.parseInt(s, 8);
}

function paxRecords(body: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < body.length) {
    const space = body.indexOf(32, i);
    if (space === -1) break;
    const len = Number.parseInt(body.subarray(i, space).toString("utf8"), 10);
    if (!Number.isFinite(len) || len <= 0) break;
    const record = body.subarray(space + 1, i + len - 1).toString("utf8");
    const eq = record.indexOf("=");
    if (eq > 0) out[record.slice(0, eq)] = record.slice(eq + 1);
    i += len;
  }
  return out;
}

const padding = (size: number) => (BLOCK - (size % BLOCK)) % BLOCK;

/**
 * The entries of a tar stream, in order. `body` yields the entry's bytes; an entry whose body is
 * not read is skipped (its bytes are read and dropped, never kept).
 */
export async function* readTar(
  source: AsyncIterable<Buffer | Uint8Array | string>,
): AsyncGenerator<{ header: TarHeader; body: () => AsyncGenerator<Buffer> }> {
  const q = new ByteQueue(source);
  let longName: string | undefined;
  let longLink: string | undefined;
  let pax: Record<string, string> = {};
  try {
    for (;;) {
      const block = await q.take(BLOCK);
      if (!block || block.every((x) => x === 0)) return;
      const flag = String.fromCharCode(block[156] ?? 0);
      let size = octal(block, 124, 12);
      if (flag === "L" || flag === "K" || flag === "x" || flag === "g") {
        const body = (await q.take(size + padding(size)))?.subarray(0, size);
        if (!body) return;
        if (flag === "L") longName = text(body, 0, body.length);
        else if (flag === "K") longLink = text(body, 0, body.length);
        else if (flag === "x") pax = { ...pax, ...paxRecords(body) };
        continue;
      }
      const prefix = text(block, 345, 155);
      let name = longName ?? pax.path ?? (prefix ? `${prefix}/${text(block, 0, 100)}` : text(block, 0, 100));
      if (pax.size !== undefined) size = Number(pax.size);
      const linkname = longLink ?? pax.linkpath ?? text(block, 157, 100);
      const type: TarEntryType =
        flag === "0" || flag === "\0" || flag === "7"
          ? "file"
          : flag === "5"
            ? "dir"
            : flag === "2"
              ? "symlink"
              : "other";
      if (type === "dir") name = name.replace(/\/+$/, "");
      const header: TarHeader = {
        name,
        type,
        size: type === "file" || type === "other" ? size : 0,
        mode: octal(block, 100, 8),
        mtime: pax.mtime !== undefined ? Number(pax.mtime) : octal(block, 136, 12),
        linkname,
      };
      longName = undefined;
      longLink = undefined;
      pax = {};
      let left = size;
      async function* body(): AsyncGenerator<Buffer> {
        while (left > 0) {
          const part = await q.some(Math.min(left, 64 * 1024));
          if (!part) throw new Error("the archive ended inside an entry");
          left -= part.length;
          yield part;
        }
      }
      yield { header, body };
      // Whatever of the body was not read is dropped here.
      for await (const _ of body()) {
        // skipped
      }
      if ((await q.take(padding(size))) === undefined && padding(size) > 0) return;
    }
  } finally {
    await q.return();
  }
}

export type TarWriteEntry = {
  name: string;
  type: "file" | "dir";
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
};

function field(b: Buffer, start: number, length: number, value: string): void {
  b.write(value, start, length, "utf8");
}
function octalField(b: Buffer, start: number, length: number, value: number): void {
  field(b, start, length, `${value.toString(8).padStart(length - 1, "0")}\0`);
}

function header(e: {
  name: string;
  flag: string;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
}): Buffer {
  const b = Buffer.alloc(BLOCK);
  field(b, 0, 100, e.name);
  octalField(b, 100, 8, e.mode);
  octalField(b, 108, 8, e.uid);
  octalField(b, 116, 8, e.gid);
  octalField(b, 124, 12, e.size);
  octalField(b, 136, 12, e.mtime);
  b.fill(32, 148, 156);
  field(b, 156, 1, e.flag);
  field(b, 257, 6, "ustar\0");
  field(b, 263, 2, "00");
  let sum = 0;
  for (const x of b) sum += x;
  field(b, 148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return b;
}

/** The header block(s) of one entry: a pax `path` record first when the name is long. */
export function tarHeader(e: TarWriteEntry): Buffer {
  const name = e.type === "dir" ? `${e.name}/` : e.name;
  const own = { ...e, name, flag: e.type === "dir" ? "5" : "0", size: e.type === "dir" ? 0 : e.size };
  if (Buffer.byteLength(name) <= 99) return header(own);
  const record = (len: number) => `${len} path=${name}\n`;
  let len = Buffer.byteLength(record(0));
  while (Buffer.byteLength(record(len)) !== len) len = Buffer.byteLength(record(len));
  const body = Buffer.from(record(len));
  return Buffer.concat([
    header({ ...own, name: "PaxHeader", flag: "x", size: body.length }),
    body,
    Buffer.alloc(padding(body.length)),
    header({ ...own, name: name.slice(-99) }),
  ]);
}

/** Padding after a body of `size` bytes. */
export function tarPadding(size: number): Buffer {
  return Buffer.alloc(padding(size));
}

/** The end of an archive. */
export const TAR_END = Buffer.alloc(BLOCK * 2);
