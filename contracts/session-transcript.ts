import { z } from "zod";

/**
 * A session's transcript as its adapter keeps it on the session volume (issue 42): the last
 * TRANSCRIPT_MAX_TURNS requests with what was asked and answered, each text cut at
 * TRANSCRIPT_TEXT_MAX characters, in `/workspace/.transcript.json` (runtimes/kit/transcript.ts). It
 * is the session's own record, next to its result records (`results.ndjson`): it lives and dies
 * with the volume (a snapshot holds it, a restore brings it back, a fork starts with it) and is
 * read through the files API like any file of the workspace, with the same scopes (the web UI
 * shows it after a reload). The agent can write to its workspace, so a reader renders it as text.
 */
export { TRANSCRIPT_FILE, TRANSCRIPT_MAX_TURNS, TRANSCRIPT_TEXT_MAX } from "./transcript-file.ts";

export const TranscriptTurn = z.object({
  /** The request's id (the result record's). */
  id: z.string(),
  /** When it finished. */
  at: z.string(),
  input: z.string(),
  outcome: z.enum(["succeeded", "failed", "cancelled"]),
  output: z.string().optional(),
  error: z.string().optional(),
  /** The tools the agent called while answering, in order (streamed requests of runtimes with `tools`). */
  tools: z.array(z.object({ name: z.string(), failed: z.boolean() })).optional(),
  /** Whether `input` or `output` was cut at TRANSCRIPT_TEXT_MAX. */
  cut: z.boolean().optional(),
});
export type TranscriptTurn = z.infer<typeof TranscriptTurn>;

export const Transcript = z.object({ turns: z.array(TranscriptTurn) });
export type Transcript = z.infer<typeof Transcript>;
