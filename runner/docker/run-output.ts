/**
 * A one-shot run's stdout read from Docker's multiplexed log stream (8-byte frame headers:
 * stream type, then the body's length) as it streams, keeping only the last `maxBytes`: a run that
 * writes gigabytes costs the runner `maxBytes` (plus one chunk), never its whole log. The tail is
 * what matters — a v1alpha1 entry's result record is its last line — and is cut at a line start
 * so no half line or half UTF-8 character leads it. `droppedBytes` says how much went.
 */
export class RunOutput {
  readonly #maxBytes: number;
  /** Kept stdout, oldest first (copies: a view would keep the engine's whole chunk alive). */
  #chunks: Buffer[] = [];
  #kept = 0;
  #dropped = 0;
  /** A frame header split across chunks. */
  #header = Buffer.alloc(0);
  /** Body bytes of the current frame still to come, and whether it is stdout. */
  #remaining = 0;
  #stdout = false;

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  /** Bytes held right now (the bound plus at most one chunk). */
  get retainedBytes(): number {
    return this.#kept + this.#header.length;
  }

  push(chunk: Buffer): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.#remaining === 0) {
        const need = 8 - this.#header.length;
        this.#header = Buffer.concat([this.#header, chunk.subarray(offset, offset + need)]);
        offset += need;
        if (this.#header.length < 8) return;
        this.#stdout = this.#header[0] === 1;
        this.#remaining = this.#header.readUInt32BE(4);
        this.#header = Buffer.alloc(0);
        continue;
      }
      const body = chunk.subarray(offset, offset + this.#remaining);
      offset += body.length;
      this.#remaining -= body.length;
      if (this.#stdout) this.#keep(body);
    }
  }

  /** The kept tail as text, and how many bytes of stdout were dropped before it. */
  result(): { text: string; droppedBytes: number } {
    let kept = Buffer.concat(this.#chunks);
    let dropped = this.#dropped;
    if (kept.length > this.#maxBytes) {
      dropped += kept.length - this.#maxBytes;
      kept = kept.subarray(kept.length - this.#maxBytes);
    }
    if (dropped > 0) {
      // Start at a line: what is before the first newline is the rest of a dropped line.
      const newline = kept.indexOf(0x0a);
      const start = newline < 0 ? kept.length : newline + 1;
      dropped += start;
      kept = kept.subarray(start);
    }
    return { text: kept.toString("utf8"), droppedBytes: dropped };
  }

  #keep(body: Buffer): void {
    if (body.length === 0) return;
    // Only the last maxBytes of a longer body can ever be kept.
    const tail = body.length > this.#maxBytes ? body.subarray(body.length - this.#maxBytes) : body;
    this.#dropped += body.length - tail.length;
    this.#chunks.push(Buffer.from(tail));
    this.#kept += tail.length;
    // Whole chunks that fall out of the last maxBytes go.
    while (this.#chunks.length > 1 && this.#kept - (this.#chunks[0]?.length ?? 0) >= this.#maxBytes) {
      const first = this.#chunks.shift() as Buffer;
      this.#kept -= first.length;
      this.#dropped += first.length;
    }
  }
}
