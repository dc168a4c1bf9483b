import { CreateTokenRequest, type TokenInfo } from "../../contracts/access.ts";
import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { age, formatData, parseOutput, table } from "../render.ts";

const USAGE =
  "token create --name NAME --scope SCOPE [--scope SCOPE…] [--ttl DURATION] | token list [-o table|json|yaml] | token revoke NAME";

/** The tokens as a table: never a secret (the server keeps none to show). */
function tokenTable(items: readonly TokenInfo[]): string {
  return table(
    ["NAME", "SCOPES", "CREATED", "EXPIRES"],
    items.map((t) => [t.name, t.scopes.join(","), age(t.createdAt), t.expiresAt ?? "never"]),
  );
}

/**
 * `token`: scoped API tokens (admin). `create` prints the new token alone on the last line of
 * stdout (shown once; the server keeps only its hash); `list` shows names, scopes and expiry;
 * `revoke NAME` stops it at once. Scopes: admin, namespace:<ns>:edit, namespace:<ns>:view,
 * session:<ns>/<name>:chat, session:<ns>/<name>:port:<port> (session ones 1 h unless --ttl says
 * otherwise; `port-token` mints a port's without admin).
 */
export const token: Command = {
  name: "token",
  aliases: ["tokens"],
  usage: USAGE,
  summary: "create, list and revoke scoped API tokens (admin)",
  flags: [
    ["--name NAME", "(create) the token's name"],
    [
      "--scope SCOPE",
      "(create) admin, namespace:NS:edit, namespace:NS:view or session:NS/NAME:chat; repeatable",
    ],
    ["--ttl DURATION", "(create) how long it works (e.g. 30m, 7d; session tokens 1h by default)"],
    ["-o, --output FORMAT", "(list) table (default), json or yaml"],
  ],
  examples: [
    "agent-sessions token create --name ci --scope namespace:default:edit --ttl 7d",
    "agent-sessions token list",
    "agent-sessions token revoke ci",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      name: { type: "string" },
      scope: { type: "string", multiple: true },
      ttl: { type: "string" },
      lifetime: { type: "string" },
      output: { type: "string", short: "o" },
    });
    const [verb = "", ...rest] = parsed.positionals;
    const ctx = contextFrom(parsed.values);
    if (verb === "create") {
      positionals(rest, [], USAGE);
      const ttl = parsed.values.ttl ?? parsed.values.lifetime;
      const request = CreateTokenRequest.safeParse({
        name: parsed.values.name,
        scopes: parsed.values.scope ?? [],
        ...(ttl !== undefined ? { ttl } : {}),
      });
      if (!request.success)
        throw new UsageError(
          `${request.error.issues.map((i) => `--${i.path[0] === "scopes" ? "scope" : String(i.path[0])}: ${i.message}`).join("\n")}\nusage: agent-sessions ${USAGE}`,
        );
      const created = await ctx.client.createToken(request.data);
      if (ctx.json) ctx.out(formatData(created, "json"));
      else {
        ctx.note(
          `token/${created.name} (${created.scopes.join(", ")}) ${created.expiresAt ? `expires ${created.expiresAt}` : "never expires"}; it is shown once, on the next line`,
        );
        ctx.out(created.token);
      }
      return 0;
    }
    if (verb === "list") {
      positionals(rest, [], USAGE);
      const format = parseOutput(parsed.values.output, ctx.json);
      const list = await ctx.client.listTokens();
      if (format !== "table") ctx.out(formatData(list, format));
      else if (list.items.length === 0) ctx.note("no API tokens (the admin token is not listed)");
      else ctx.out(tokenTable(list.items));
      return 0;
    }
    if (verb === "revoke") {
      const [name = ""] = positionals(rest, ["NAME"], USAGE);
      const revoked = await ctx.client.revokeToken(name);
      if (ctx.json) ctx.out(formatData(revoked, "json"));
      else ctx.note(`token/${name} revoked: it no longer works`);
      return 0;
    }
    throw new UsageError(
      `token: expected create, list or revoke, got "${verb}"\nusage: agent-sessions ${USAGE}`,
    );
  },
};
