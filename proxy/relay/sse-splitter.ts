/**
 * Splits a server-sent event stream (WHATWG HTML §9.2.6, the parts an adapter uses) into the
 * `data` of each complete event, keeping an unfinished event between chunks. Comment lines and
 * other fields are dropped; several `data:` lines of one event are joined with "\n".
 */
export class SseSplitter {
  #buffer = "";

  push(chunk: string): string[] {
    this.#buffer += chunk.replace(/\r\n?/g, "\n");
    const out: string[] = [];
    let end = this.#buffer.indexOf("\n\n");
    while (end >= 0) {
      const block = this.#buffer.slice(0, end);
      this.#buffer = this.#buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5));
      if (data.length) out.push(data.join("\n"));
      end = this.#buffer.indexOf("\n\n");
    }
    return out;
  }

  /** Bytes of an unfinished event still held. */
  get pending(): number {
    return this.#buffer.length;
  }
}
