/**
 * Host isolation for a session network. Docker's `--internal` blocks other networks but NOT the
 * host: a container reaches host services listening on 0.0.0.0 through its bridge gateway
 * (seen on the test bed's dockerd 20.10: an internal container reached a host service through
 * the gateway). We add, per session bridge, rules in a chain of our own:
 *   - INPUT: from the bridge, only replies (ESTABLISHED,RELATED) and the allowed endpoints pass;
 *     everything else is dropped, so no session reaches a control-plane port.
 *   - nat PREROUTING: `gateway:port` → the allowed host-local endpoint. An internal network has no
 *     default route, so the gateway is the only address a session can reach; this maps it to the
 *     model endpoint the Agent allows and to nothing else.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);
export const GUARD_CHAIN = "AGENT-SESSIONS-INPUT";
export const NAT_CHAIN = "AGENT-SESSIONS-DNAT";

export type AllowedEndpoint = { address: string; port: number };

async function iptables(args: string[]): Promise<{ ok: boolean; stderr: string }> {
  try {
    await run("iptables", ["-w", "5", ...args]);
    return { ok: true, stderr: "" };
  } catch (error) {
    return { ok: false, stderr: String((error as { stderr?: string }).stderr ?? error) };
  }
}

async function ensureChain(
  table: "filter" | "nat",
  chain: string,
  hook: "INPUT" | "PREROUTING",
): Promise<void> {
  await iptables(["-t", table, "-N", chain]); // exists already: fine
  if (!(await iptables(["-t", table, "-C", hook, "-j", chain])).ok) {
    const added = await iptables(["-t", table, "-I", hook, "1", "-j", chain]);
    if (!added.ok) throw new Error(`cannot hook ${chain} into ${hook}: ${added.stderr.trim()}`);
  }
}

/**
 * A Linux interface name (IFNAMSIZ: 1-15 characters). Rules are found again by the bridge named in
 * their comment: an empty or odd name would match other sessions' rules, so none is accepted.
 */
const BRIDGE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$/;

export function assertBridgeName(bridge: string): void {
  if (!BRIDGE_NAME.test(bridge))
    throw new Error(`"${bridge}" is not a bridge interface name (1-15 of A-Z a-z 0-9 _ . -)`);
}

/** The words of an `iptables -S` line, quotes removed. */
function words(line: string): string[] {
  return line.match(/"[^"]*"|\S+/g)?.map((t) => t.replace(/^"|"$/g, "")) ?? [];
}

/** Whether an `iptables -S` line is a rule of ours in `chain` for exactly this bridge (not a prefix of it). */
export function isRuleOf(line: string, chain: string, bridge: string): boolean {
  const w = words(line);
  if (w[0] !== "-A" || w[1] !== chain) return false;
  const at = w.indexOf("--comment");
  return at >= 0 && w[at + 1] === `agent-sessions:${bridge}`;
}

function ruleComment(bridge: string): string[] {
  return ["-m", "comment", "--comment", `agent-sessions:${bridge}`];
}

/**
 * Installs the rules for one bridge, idempotently: the new rules are appended first and the
 * bridge's old ones (those listed before) deleted after, so a bridge whose rules are installed
 * again (the provider adopting a network the runner's fast create made) is never without a DROP
 * for a moment. `iptables -D` by rule deletes the first match: the old rule, ahead in the chain.
 */
export async function isolateBridge(
  bridge: string,
  gateway: string,
  allowed: AllowedEndpoint[],
): Promise<void> {
  assertBridgeName(bridge);
  const old = await bridgeRules(bridge);
  await ensureChain("filter", GUARD_CHAIN, "INPUT");
  await ensureChain("nat", NAT_CHAIN, "PREROUTING");
  const add = async (table: string, chain: string, rule: string[]) => {
    const r = await iptables(["-t", table, "-A", chain, "-i", bridge, ...rule, ...ruleComment(bridge)]);
    if (!r.ok) throw new Error(`cannot isolate ${bridge}: ${r.stderr.trim()}`);
  };
  await add("filter", GUARD_CHAIN, ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]);
  for (const ep of allowed) {
    await add("nat", NAT_CHAIN, [
      "-p",
      "tcp",
      "-d",
      gateway,
      "--dport",
      String(ep.port),
      "-j",
      "DNAT",
      "--to-destination",
      `${ep.address}:${ep.port}`,
    ]);
    await add("filter", GUARD_CHAIN, [
      "-p",
      "tcp",
      "-d",
      ep.address,
      "--dport",
      String(ep.port),
      "-j",
      "RETURN",
    ]);
  }
  await add("filter", GUARD_CHAIN, ["-j", "DROP"]);
  await deleteRules(old);
}

type TableRule = { table: "filter" | "nat"; line: string };

/** Every rule of ours that names the bridge (exactly), as `iptables -S` lists it, chain order. */
async function bridgeRules(bridge: string): Promise<TableRule[]> {
  const found: TableRule[] = [];
  for (const [table, chain] of [
    ["filter", GUARD_CHAIN],
    ["nat", NAT_CHAIN],
  ] as const) {
    let listing: string;
    try {
      listing = (await run("iptables", ["-w", "5", "-t", table, "-S", chain])).stdout;
    } catch {
      continue; // no chain: nothing of ours
    }
    for (const line of listing.split("\n")) if (isRuleOf(line, chain, bridge)) found.push({ table, line });
  }
  return found;
}

async function deleteRules(rules: TableRule[]): Promise<void> {
  for (const { table, line } of rules) await iptables(["-t", table, "-D", ...words(line).slice(1)]);
}

/** Removes every rule of ours that names the bridge (exactly; an empty name is refused). */
export async function removeBridgeRules(bridge: string): Promise<void> {
  assertBridgeName(bridge);
  await deleteRules(await bridgeRules(bridge));
}

/** Packets our guard dropped for a bridge (for tests and metrics). */
export async function droppedPackets(bridge: string): Promise<number> {
  const { stdout } = await run("iptables", ["-w", "5", "-t", "filter", "-L", GUARD_CHAIN, "-v", "-x", "-n"]);
  let total = 0;
  for (const line of stdout.split("\n")) {
    if (line.includes("DROP") && line.includes(`agent-sessions:${bridge}`))
      total += Number(line.trim().split(/\s+/)[0] ?? 0);
  }
  return total;
}
