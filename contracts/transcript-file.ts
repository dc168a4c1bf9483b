/**
 * Where and how much of a session's transcript its adapter keeps (contracts/session-transcript.ts),
 * as plain values: the web UI reads them without bundling zod (like contracts/error-codes.ts).
 */
export const TRANSCRIPT_FILE = ".transcript.json";
export const TRANSCRIPT_MAX_TURNS = 50;
export const TRANSCRIPT_TEXT_MAX = 16 * 1024;
