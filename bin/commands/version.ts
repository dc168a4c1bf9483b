import { readFileSync } from "node:fs";
import { ClientError } from "../../client/client-error.ts";
import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { formatData, parseOutput } from "../render.ts";

const USAGE = "version [--client] [-o json|yaml]";

/** This CLI's version: the package's (package.json at the repository root). */
export function clientVersion(): string {
  return (
    JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
  ).version;
}

/**
 * `version`: the CLI's version and, when the server answers (`GET /v1/version`), the server's.
 * An unreachable server is said on stderr but is not a failure (kubectl version does the same).
 */
export const version: Command = {
  name: "version",
  usage: USAGE,
  summary: "the CLI's version and the server's (when reachable)",
  description:
    "Prints this CLI's version and the server's (GET /v1/version, any valid token). A server that\ncannot be reached or refuses the token is said on stderr; the exit code stays 0.",
  flags: [
    ["--client", "the CLI's version only: do not ask the server"],
    ["-o, --output FORMAT", "table (default), json or yaml"],
  ],
  examples: ["agent-sessions version", "agent-sessions version --client", "agent-sessions version -o json"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      client: { type: "boolean", default: false },
      output: { type: "string", short: "o" },
    });
    positionals(parsed.positionals, [], USAGE);
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    const client = { version: clientVersion(), node: process.versions.node };
    let server: { version: string; apiVersion: string; node: string } | undefined;
    let unreachable: string | undefined;
    if (!parsed.values.client) {
      try {
        server = await ctx.client.version();
      } catch (error) {
        if (!(error instanceof ClientError)) throw error;
        unreachable = `${error.code}: ${error.message}`;
      }
    }
    if (format !== "table") ctx.out(formatData({ client, ...(server ? { server } : {}) }, format));
    else {
      ctx.out(`Client Version: ${client.version} (node ${client.node})`);
      if (server)
        ctx.out(
          `Server Version: ${server.version} (API ${server.apiVersion}, node ${server.node}) at ${ctx.serverUrl}`,
        );
    }
    if (unreachable) ctx.note(`server ${ctx.serverUrl}: ${unreachable}`);
    return 0;
  },
};
