/**
 * The port the model gateway listened on, kept in the runner's data directory: a session's
 * workload holds the gateway's URL in its environment, so a runner that restarts listens on the
 * same port again and the sessions it left running keep reaching their model.
 */
import { readFileSync } from "node:fs";
import { z } from "zod";
import { writePrivateFile } from "./private-file.ts";

export const GATEWAY_PORT_FILE_NAME = "gateway.json";

const Kept = z.object({ host: z.string(), port: z.number().int().min(1).max(65535) });

/** The port kept for `host`; undefined when none is (first start, another host, unreadable). */
export function keptGatewayPort(file: string, host: string): number | undefined {
  try {
    const kept = Kept.safeParse(JSON.parse(readFileSync(file, "utf8")));
    return kept.success && kept.data.host === host ? kept.data.port : undefined;
  } catch {
    return undefined;
  }
}

export function keepGatewayPort(file: string, host: string, port: number): void {
  writePrivateFile(file, JSON.stringify({ host, port }));
}
