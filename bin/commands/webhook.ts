import type { WebhookDelivery } from "../../contracts/webhook.ts";
import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { age, formatData, parseOutput, table } from "../render.ts";

const USAGE = "webhook deliveries NAME [-n NAMESPACE] [-o table|json|yaml]";

/** Recent attempts as a table, newest first. */
function deliveryTable(items: readonly WebhookDelivery[]): string {
  return table(
    ["ID", "TYPE", "SESSION", "ATTEMPT", "OUTCOME", "STATUS", "DURATION", "AGE"],
    items.map((d) => [
      d.id,
      d.type,
      d.session.name,
      String(d.attempt),
      d.outcome,
      d.statusCode === undefined ? (d.error ?? "") : String(d.statusCode),
      `${Math.round(d.durationMs)}ms`,
      age(d.time),
    ]),
  );
}

/**
 * `webhook deliveries NAME`: a Webhook's recent delivery attempts (status code or error,
 * duration, attempt number, outcome). Webhooks themselves are written with `apply` (a generated
 * secret is printed once) and read with `get webhooks`.
 */
export const webhook: Command = {
  name: "webhook",
  aliases: ["webhooks"],
  usage: USAGE,
  summary: "show a webhook's recent delivery attempts",
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { output: { type: "string", short: "o" } });
    const [verb = "", ...rest] = parsed.positionals;
    if (verb !== "deliveries") throw new UsageError(`usage: agent-sessions ${USAGE}`);
    const [name] = positionals(rest, ["NAME"], USAGE) as [string];
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    const { items } = await ctx.client.webhookDeliveries(ctx.namespace, name);
    if (format !== "table") ctx.out(formatData({ items }, format));
    else if (items.length === 0)
      ctx.note(`no deliveries of webhook/${name} yet (this server's, since it started)`);
    else ctx.out(deliveryTable(items));
    return 0;
  },
};
