import { createHash } from "node:crypto";

/**
 * The session name of a new workspace (the `name` of its SessionSpec; its container is
 * `workloadName(namespace, name)`): readable agent and workstream, then a short hash of the
 * client_request_id, so a workspace re-created after removal never reuses a name whose old stack
 * may still be on its way out. Always an RFC 1123 DNS label without `--` (stack names use it).
 */
export function workspaceName(agentName: string, workstream: string, clientRequestId: string): string {
  const hash = createHash("sha256").update(clientRequestId).digest("hex").slice(0, 8);
  const stem = [agentName, workstream]
    .join("-")
    .replace(/[^a-z0-9-]/g, "")
    .replace(/-+/g, "-")
    .replace(/^-+|-+$/g, "");
  const room = 63 - hash.length - 1;
  const head = stem.slice(0, room).replace(/-+$/, "");
  return head ? `${head}-${hash}` : `w-${hash}`;
}
