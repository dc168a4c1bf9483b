/**
 * The bearer the runner presents on its link (proxy/PROTOCOL.md §1, §2). A runner configured
 * with the shared runner token registers with it once; the server's `welcome` then carries the
 * runner's own credential, kept here in `<data-dir>/runner-credential` (mode 0600) and presented
 * on every later connect, across restarts. A credential configured explicitly (an admin's
 * `agent-sessions runners token create NAME`) is presented as it is and never replaced.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { RUNNER_CREDENTIAL_PREFIX } from "../../contracts/runner-protocol.ts";

export const CREDENTIAL_FILE_NAME = "runner-credential";

export class RunnerCredential {
  readonly #configured: string;
  readonly #file: string | undefined;
  #saved: string | undefined;
  /** The server refused the saved credential (401): register again with the configured token. */
  #savedRefused = false;

  /** `configured`: the runner token or a runner credential; `file`: where an issued credential is kept. */
  constructor(configured: string, file: string | undefined) {
    this.#configured = configured;
    this.#file = this.configuredIsCredential ? undefined : file;
    this.#saved = this.#file === undefined ? undefined : readSaved(this.#file);
  }

  get configuredIsCredential(): boolean {
    return this.#configured.startsWith(RUNNER_CREDENTIAL_PREFIX);
  }

  /** What to present on the next connect. */
  bearer(): string {
    return this.#saved !== undefined && !this.#savedRefused ? this.#saved : this.#configured;
  }

  /** Presenting the credential the server issued this runner (not the registration token). */
  get presentingSaved(): boolean {
    return this.bearer() === this.#saved;
  }

  /**
   * The server issued this runner its credential: present it from now on and keep it (written
   * whole, 0600). Without a file (an explicit credential) nothing is kept.
   */
  issued(credential: string): { ok: true } | { ok: false; error: string } {
    if (this.#file === undefined) return { ok: true };
    this.#saved = credential;
    this.#savedRefused = false;
    const temporary = `${this.#file}.tmp`;
    try {
      mkdirSync(dirname(this.#file), { recursive: true, mode: 0o700 });
      rmSync(temporary, { force: true }); // the mode applies to a file written anew only
      writeFileSync(temporary, `${credential}\n`, { mode: 0o600 });
      renameSync(temporary, this.#file);
      return { ok: true };
    } catch (error) {
      return { ok: false, error: String(error) };
    }
  }

  /**
   * The server answered 401 to the saved credential (it does not know it: e.g. its store was
   * reset). The next connect registers again with the configured token; the file is replaced only
   * when a new credential is issued. True when that fallback was taken.
   */
  refused(): boolean {
    if (!this.presentingSaved || this.configuredIsCredential) return false;
    this.#savedRefused = true;
    return true;
  }
}

function readSaved(file: string): string | undefined {
  try {
    const text = readFileSync(file, "utf8").trim();
    return text.startsWith(RUNNER_CREDENTIAL_PREFIX) ? text : undefined;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}
