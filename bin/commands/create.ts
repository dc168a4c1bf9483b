import type { Command } from "../command.ts";
import { applyManifests } from "./apply.ts";

const USAGE = "create -f FILE|- [-f FILE…] [-n NAMESPACE] [--wait] [--timeout 10m]";

/**
 * `create`: like `apply`, but never replaces: a document whose name is in use fails
 * ALREADY_EXISTS (exit 4) and the stored object stays as it was (PUT with `If-None-Match: *`).
 */
export const create: Command = {
  name: "create",
  usage: USAGE,
  summary: "create resources from YAML manifests; a name in use is an error, never replaced",
  flags: [
    ["-f, --filename FILE", "a YAML file (documents separated by ---); - reads stdin; repeatable"],
    ["--wait", "then wait until each HarnessSession is Ready"],
    ["--timeout DURATION", "how long --wait waits (default 10m)"],
  ],
  examples: [
    "agent-sessions create -f agent.yaml          # exit 4 if agent/NAME exists already",
    "agent-sessions create -f - < session.yaml",
  ],
  run: (argv) => applyManifests(argv, "create", USAGE),
};
