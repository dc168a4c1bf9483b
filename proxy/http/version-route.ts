import { readFileSync } from "node:fs";
import { API_VERSION } from "../../contracts/resources.ts";

/** What `GET /v1/version` answers (`agent-sessions version` prints it beside its own). */
export type ServerVersion = { version: string; apiVersion: string; node: string };

let cached: ServerVersion | undefined;

/** The package's version (package.json at the repository root), the API version and Node's. */
export function serverVersion(): ServerVersion {
  cached ??= {
    version: (
      JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
    ).version,
    apiVersion: API_VERSION,
    node: process.versions.node,
  };
  return cached;
}
