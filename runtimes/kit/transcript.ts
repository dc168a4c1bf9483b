/**
 * The adapter's transcript file (contracts/session-transcript.ts): the last turns of the session,
 * rewritten whole after each request (write to a temporary file, then rename: a reader never sees
 * half a file). Loaded at start, so it continues across restarts, restores and forks. A file that
 * cannot be read (absent, or damaged by the agent) starts a new transcript; one that cannot be
 * written is left as it was: the transcript never fails a request.
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import {
  TRANSCRIPT_FILE,
  TRANSCRIPT_MAX_TURNS,
  TRANSCRIPT_TEXT_MAX,
  Transcript,
  type TranscriptTurn,
} from "../../contracts/session-transcript.ts";

export class TranscriptFile {
  readonly #path: string;
  #turns: TranscriptTurn[];

  constructor(workspace: string) {
    this.#path = `${workspace}/${TRANSCRIPT_FILE}`;
    this.#turns = read(this.#path);
  }

  get turns(): readonly TranscriptTurn[] {
    return this.#turns;
  }

  /** One finished request; the oldest turns go past TRANSCRIPT_MAX_TURNS. */
  add(turn: Omit<TranscriptTurn, "cut">): void {
    const input = cut(turn.input);
    const output = turn.output === undefined ? undefined : cut(turn.output);
    const kept: TranscriptTurn = {
      ...turn,
      input: input.text,
      ...(output ? { output: output.text } : {}),
      ...(input.cut || output?.cut ? { cut: true } : {}),
    };
    this.#turns = [...this.#turns, kept].slice(-TRANSCRIPT_MAX_TURNS);
    try {
      writeFileSync(`${this.#path}.tmp`, JSON.stringify({ turns: this.#turns }));
      renameSync(`${this.#path}.tmp`, this.#path);
    } catch {
      // A full or read-only volume: the transcript stays as it was on disk.
    }
  }
}

function cut(text: string): { text: string; cut: boolean } {
  return text.length > TRANSCRIPT_TEXT_MAX
    ? { text: text.slice(0, TRANSCRIPT_TEXT_MAX), cut: true }
    : { text, cut: false };
}

function read(path: string): TranscriptTurn[] {
  try {
    const parsed = Transcript.safeParse(JSON.parse(readFileSync(path, "utf8")));
    return parsed.success ? parsed.data.turns.slice(-TRANSCRIPT_MAX_TURNS) : [];
  } catch {
    return [];
  }
}
