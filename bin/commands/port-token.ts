import { type Command, parseCommand, positionals } from "../command.ts";
import { contextFrom, UsageError } from "../cli-context.ts";
import { formatData } from "../render.ts";

const USAGE = "port-token SESSION PORT [-n NAMESPACE] [--ttl 15m]";

/**
 * `port-token`: a short-lived token that opens one declared port of a HarnessSession (issue 40;
 * scope `session:<ns>/<name>:port:<port>`, nothing else), and the port's URL. Prints the URL,
 * then the token alone on the last line of stdout (shown once). Needs the session's chat token,
 * the namespace's edit or admin.
 */
export const portToken: Command = {
  name: "port-token",
  usage: USAGE,
  summary: "mint a short-lived token for one declared port of a HarnessSession, with its URL",
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { ttl: { type: "string" } });
    const [name = "", rawPort = ""] = positionals(parsed.positionals, ["SESSION", "PORT"], USAGE);
    const port = Number(rawPort);
    if (!/^[1-9][0-9]*$/.test(rawPort) || port < 1024 || port > 65535)
      throw new UsageError(
        `PORT must be a number from 1024 to 65535, got "${rawPort}"\nusage: agent-sessions ${USAGE}`,
      );
    const ctx = contextFrom(parsed.values);
    const created = await ctx.client.createPortToken(ctx.namespace, name, port, {
      ...(parsed.values.ttl !== undefined ? { ttl: parsed.values.ttl } : {}),
    });
    if (ctx.json) ctx.out(formatData(created, "json"));
    else {
      ctx.note(
        `token/${created.name} opens port ${port} of harnesssession/${name} only; expires ${created.expiresAt ?? "never"}; send it as "Authorization: Bearer <token>"`,
      );
      ctx.out(created.url);
      ctx.out(created.token);
    }
    return 0;
  },
};
