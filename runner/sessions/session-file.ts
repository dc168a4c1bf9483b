/**
 * The runner's authoritative session set on disk (`<data-dir>/agent-sessions.json`), so a runner
 * that restarts (crash, SIGKILL, upgrade) still knows which agents it ran and where. The agents
 * themselves do not survive it: their exec streams end with the runner's process (closing the
 * agent's stdin), so the restarted runner starts each live one again in its workspace, resuming
 * from the workspace state, before its `hello` reports the set (proxy/PROTOCOL.md §2, §5).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { z } from "zod";
import { SavedRunnerSession } from "../../contracts/runner-protocol.ts";

// `command` was added within version 1 (optional): a file written before it still loads.
const SessionFileContent = z.object({ version: z.literal(1), sessions: z.array(SavedRunnerSession) });

export const SESSION_FILE_NAME = "agent-sessions.json";

export class SessionFile {
  readonly path: string;

  constructor(path: string) {
    this.path = path;
  }

  /** The set saved last; empty when there is none. A file that does not parse is an error, not an empty set. */
  load(): SavedRunnerSession[] {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw error;
    }
    const parsed = SessionFileContent.safeParse(JSON.parse(text));
    if (!parsed.success)
      throw new Error(`${this.path} is not a runner session file: ${parsed.error.message}`);
    return parsed.data.sessions;
  }

  /** Replaces the saved set atomically (write aside, then rename). */
  save(sessions: SavedRunnerSession[]): void {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const aside = `${this.path}.${process.pid}.tmp`;
    writeFileSync(aside, `${JSON.stringify({ version: 1, sessions })}\n`, { mode: 0o600 });
    renameSync(aside, this.path);
  }
}
