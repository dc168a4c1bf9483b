/**
 * Log limits of every container agent-sessions creates on Docker (sessions and one-shot runs).
 * Without them the json-file driver keeps whatever a container prints, without bound, on the
 * engine's disk: an agent could fill it. A session's frames come over the exec stream, not the
 * container log, so the log only holds the adapter's own lines; a run's output is read from it
 * and kept to its last MiB anyway (runner/docker/one-shot.ts).
 */
export const CONTAINER_LOG_MAX_BYTES_PER_FILE = 2 * 1024 * 1024;
export const CONTAINER_LOG_MAX_FILES = 2;

/** Docker's HostConfig.LogConfig: json-file, rotated at 2 MiB, at most 2 files. */
export const CONTAINER_LOG_CONFIG = {
  Type: "json-file",
  Config: {
    "max-size": String(CONTAINER_LOG_MAX_BYTES_PER_FILE),
    "max-file": String(CONTAINER_LOG_MAX_FILES),
  },
} as const;
