import type { SessionSpec } from "../../../contracts/session-spec.ts";

// Pure (no Pulumi): the runner's one-shot path (runner/docker/one-shot.ts) uses it without
// loading @pulumi/pulumi; the DockerSession component (infra/docker/session.ts) too.

/**
 * Rewrites a URL that names an allowed host-local endpoint so that it names the session
 * network's gateway instead: an internal network has no route elsewhere, and the gateway maps
 * exactly the allowed ports to that endpoint (see docker-provider/host-isolation.ts).
 */
export function viaGateway(url: string, egress: SessionSpec["egress"], gateway: string): string {
  for (const rule of egress) {
    const address = rule.cidr.replace(/\/32$/, "");
    const needle = `//${address}:${rule.port}`;
    if (url.includes(needle)) return url.replace(needle, `//${gateway}:${rule.port}`);
  }
  return url;
}
