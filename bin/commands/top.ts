import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { bytes, table } from "../render.ts";

const USAGE = "top SESSION [-n NAMESPACE] [-o json]   (CPU, memory, network and volume of its workload now)";

/**
 * `top`: what a HarnessSession's workload uses now (`GET …/harnesssessions/{name}/metrics`), as
 * `kubectl top pod` shows a pod: CPU in cores (of its limit), memory (of its limit), network
 * received and sent since it started, the volume's bytes in use.
 */
export const top: Command = {
  name: "top",
  usage: USAGE,
  summary: "show what a session's workload uses now: CPU, memory, network, volume",
  flags: [["-o, --output json", "the reading as JSON"]],
  examples: ["agent-sessions top coding"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [session = ""] = positionals(parsed.positionals, ["SESSION"], USAGE);
    const ctx = contextFrom(parsed.values);
    const reply = await ctx.client.sessionMetrics(ctx.namespace, session);
    if (ctx.json) {
      ctx.out(JSON.stringify(reply));
      return 0;
    }
    const m = reply.metrics;
    const of = (used: string, limit: string | undefined) => (limit === undefined ? used : `${used}/${limit}`);
    ctx.out(
      table(
        ["NAME", "PHASE", "CPU(cores)", "MEMORY", "NET RX/TX", "VOLUME", "SINCE"],
        [
          [
            reply.name,
            reply.phase,
            of(m.cpu.cores.toFixed(3), m.cpu.limitCores?.toString()),
            of(
              bytes(m.memory.bytes),
              m.memory.limitBytes === undefined ? undefined : bytes(m.memory.limitBytes),
            ),
            `${bytes(m.network.rxBytes)}/${bytes(m.network.txBytes)}`,
            m.volume ? bytes(m.volume.usedBytes) : "—",
            m.since,
          ],
        ],
      ),
    );
    return 0;
  },
};
