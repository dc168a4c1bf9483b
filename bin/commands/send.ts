import { readFileSync } from "node:fs";
import type { ResultRecord } from "../../contracts/adapter.ts";
import { ClientError } from "../../client/client-error.ts";
import { CommandFailed, contextFrom, ExitCode, HintedError, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";

const USAGE = "send SESSION MESSAGE|- [-n NAMESPACE] [--no-stream] [--id REQUEST_ID]";

function usageLine(result: ResultRecord): string {
  const usage =
    result.usage === "unavailable"
      ? "usage unavailable"
      : `${result.usage.input_tokens} in / ${result.usage.output_tokens} out tokens`;
  return `(${result.id}: ${result.outcome}; ${usage})`;
}

/** A result that did not succeed is exit 1, saying why. */
function outcomeExit(result: ResultRecord): number {
  if (result.outcome === "succeeded") return 0;
  throw new CommandFailed(
    `request ${result.id} ${result.outcome}${result.error ? `: ${result.error}` : ""}`,
    ExitCode.failure,
  );
}

/**
 * `send`: one request to a HarnessSession through the proxy. The reply streams by default (its
 * text as it arrives on stdout, the outcome and usage on stderr); `--json` prints each event
 * as a JSON line. Ctrl-C cancels the request at the agent.
 */
export const send: Command = {
  name: "send",
  usage: USAGE,
  summary: "send a message to a HarnessSession and print the reply as it streams",
  flags: [
    ["--no-stream", "wait for the whole reply (runtimes that do not stream)"],
    ["--id REQUEST_ID", "the request's id (default: a new one); cancel with it"],
  ],
  examples: [
    'agent-sessions send coding "write notes.txt with hello"',
    'echo "long prompt" | agent-sessions send coding -',
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      "no-stream": { type: "boolean", default: false },
      id: { type: "string" },
    });
    const [name = "", messageArg = ""] = positionals(parsed.positionals, ["SESSION", "MESSAGE"], USAGE);
    const input = messageArg === "-" ? readFileSync(0, "utf8") : messageArg;
    if (input.trim() === "") throw new UsageError("the message is empty");
    const ctx = contextFrom(parsed.values);
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    process.once("SIGINT", onInterrupt);
    try {
      if (parsed.values["no-stream"]) {
        const result = await ctx.client.send(ctx.namespace, name, input, {
          id: parsed.values.id,
          signal: abort.signal,
        });
        if (ctx.json) ctx.out(JSON.stringify(result));
        else {
          ctx.out(result.output ?? "");
          ctx.note(usageLine(result));
        }
        return outcomeExit(result);
      }
      let result: ResultRecord | undefined;
      let wroteText = false;
      for await (const event of ctx.client.sendStreaming(ctx.namespace, name, input, {
        id: parsed.values.id,
        signal: abort.signal,
      })) {
        if (event.type === "result") result = event.result;
        if (ctx.json) ctx.out(JSON.stringify(event));
        else if (event.type === "delta") {
          process.stdout.write(event.text);
          wroteText ||= event.text.length > 0;
        } else if (event.type === "tool" && event.phase === "start") ctx.note(`[tool ${event.name}]`);
      }
      if (!ctx.json && wroteText) process.stdout.write("\n");
      if (!result) throw new CommandFailed("the stream ended without a result", ExitCode.failure);
      if (!ctx.json) ctx.note(usageLine(result));
      return outcomeExit(result);
    } catch (error) {
      if (abort.signal.aborted) {
        ctx.note("cancelled");
        return 130;
      }
      if (error instanceof ClientError && error.code === "INVALID_ARGUMENT" && !parsed.values["no-stream"])
        throw new HintedError(error, "a runtime that does not declare streaming takes --no-stream");
      if (error instanceof ClientError && error.code === "FAILED_PRECONDITION")
        throw new HintedError(
          error,
          `see why with \`agent-sessions describe hs ${name}\`; \`agent-sessions resume ${name}\` brings a stopped session back`,
        );
      if (error instanceof ClientError && error.code === "NOT_FOUND")
        throw new HintedError(error, "list the sessions with `agent-sessions get hs` (and -n NAMESPACE)");
      throw error;
    } finally {
      process.off("SIGINT", onInterrupt);
    }
  },
};
