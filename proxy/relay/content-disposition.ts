/**
 * `Content-Disposition: attachment` for a file name of any characters (RFC 6266 with RFC 5987's
 * `filename*`). A header value is Latin-1 only, so a name above U+00FF put raw in `filename=`
 * makes the response throw (a 500): the quoted `filename` is an ASCII fallback (anything else,
 * `"` and `\` become `_`), and `filename*=UTF-8''…` carries the real name percent-encoded.
 */
export function attachmentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]|["\\]/g, "_");
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encodeRfc5987(name)}`;
}

/** RFC 5987 `value-chars`: attr-char kept, every other UTF-8 byte as %XX (a lone surrogate as U+FFFD). */
function encodeRfc5987(value: string): string {
  let out = "";
  for (const byte of Buffer.from(value, "utf8")) {
    const ch = String.fromCharCode(byte);
    out += /[A-Za-z0-9!#$&+\-.^_`|~]/.test(ch) ? ch : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}
