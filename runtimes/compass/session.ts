/**
 * One compass conversation on the Oh My Pi SDK (`@oh-my-pi/pi-agent-core`): the Agent, our tools,
 * the model built with `buildModel` for the Agent's OpenAI-compatible endpoint, and the messages
 * kept as JSON in `<workspace>/.compass/<name>.json` (the SDK keeps none), so a stopped and
 * resumed workload goes on where it was. `run` maps the SDK's events to what the adapter and the
 * seed-004 agent emit: text deltas, tool start/end, and an outcome with usage summed over the
 * run's assistant messages (0 tokens means the model sent none: "unavailable", never a zero).
 * The SDK's prompt() does not throw on a model error; it ends with `stopReason: "error"`.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Agent, type AgentEvent, type AgentMessage } from "@oh-my-pi/pi-agent-core";
import { streamSimple } from "@oh-my-pi/pi-ai";
import { buildModel } from "@oh-my-pi/pi-catalog/build";
import { type MessageUsage, NO_MODEL, summedUsage, type TurnOptions, type TurnOutcome } from "../kit/turn.ts";
import { sessionSkillFiles, skillsPrompt } from "../kit/skills.ts";
import { confinement } from "./confine.ts";
import type { CompassSettings } from "./settings.ts";
import { compassTools, mcpTools } from "./tools.ts";

const SYSTEM_PROMPT =
  "You are compass, a coding agent working in /workspace. Use the tools to read, write and edit files and to run commands there.";

/** Assistant messages of one run are separated by a blank line in the answer. */
const TURN_SEPARATOR = "\n\n";

/**
 * The SDK retries a failed model call up to six times with backoff (~15 s) before it reports the
 * error; one request has one deadline (the adapter's), so a failure is reported at once: a
 * retryable answer gets a Retry-After beyond the SDK's cap (it then returns it as is), and an
 * unreachable endpoint becomes such an answer too.
 */
const failFastFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const noRetry = { "retry-after": "86400" };
  let res: Response;
  try {
    res = await fetch(input, init);
  } catch (error) {
    if (init?.signal?.aborted) throw error;
    return Response.json(
      { error: { message: `the model endpoint could not be reached (${(error as Error).message})` } },
      { status: 503, headers: noRetry },
    );
  }
  if (res.status < 500 && res.status !== 408 && res.status !== 429) return res;
  const headers = new Headers(res.headers);
  headers.set("retry-after", noRetry["retry-after"]);
  return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
};

type AssistantLike = {
  role?: string;
  stopReason?: string;
  errorMessage?: string;
  usage?: MessageUsage;
};

export class CompassSession {
  readonly #settings: CompassSettings;
  readonly #file: string;
  readonly #agent: Agent | undefined;
  /** The MCP servers' tools were added (once, at the first turn: listing them is a network call). */
  #mcpAdded = false;

  constructor(settings: CompassSettings, name: string) {
    this.#settings = settings;
    mkdirSync(settings.stateDir, { recursive: true, mode: 0o700 });
    this.#file = join(settings.stateDir, `${name}.json`);
    if (!settings.model) return;
    const model = buildModel({
      id: settings.model.name,
      name: settings.model.name,
      api: "openai-completions",
      provider: "session",
      baseUrl: settings.model.baseUrl,
      reasoning: false,
      input: ["text"],
      cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
      contextWindow: 128_000,
      maxTokens: 8_192,
    } as Parameters<typeof buildModel>[0]);
    this.#agent = new Agent({
      initialState: {
        // The session's skills (issue 39): the SDK has no skills mechanism of its own.
        systemPrompt: [SYSTEM_PROMPT, ...[skillsPrompt(sessionSkillFiles())].filter(Boolean)],
        model,
        tools: compassTools(settings.tools, confinement(settings.workspace)),
        messages: this.#load(),
      },
      getApiKey: () => settings.apiKey ?? "none",
      streamFn: (m, context, options) => streamSimple(m, context, { ...options, fetch: failFastFetch }),
    });
  }

  /** One prompt, to the end of the agent's run. Callers run one at a time. */
  async run(input: string, options: TurnOptions = {}): Promise<TurnOutcome> {
    const agent = this.#agent;
    if (!agent) return { outcome: "failed", error: NO_MODEL, text: "" };
    if (options.signal?.aborted) return { outcome: "cancelled", text: "" };
    const mcp = this.#settings.mcp;
    if (mcp && !this.#mcpAdded) {
      try {
        agent.setTools([...agent.state.tools, ...(await mcpTools(mcp))]);
        this.#mcpAdded = true;
      } catch (error) {
        // The turn goes on without them; the next one asks again.
        process.stderr.write(
          `compass: the MCP servers' tools could not be listed: ${(error as Error).message}\n`,
        );
      }
    }
    let text = "";
    let messageHasText = false;
    const usages: MessageUsage[] = [];
    let lastError: string | undefined;
    let aborted = false;
    const unsubscribe = agent.subscribe((event: AgentEvent) => {
      switch (event.type) {
        case "message_start":
          if ((event.message as AssistantLike).role === "assistant") messageHasText = false;
          break;
        case "message_update": {
          const e = event.assistantMessageEvent as { type?: string; delta?: string };
          if (e.type !== "text_delta" || !e.delta) break;
          const delta = !messageHasText && text ? `${TURN_SEPARATOR}${e.delta}` : e.delta;
          messageHasText = true;
          text += delta;
          options.onDelta?.(delta);
          break;
        }
        case "message_end": {
          const done = event.message as AssistantLike;
          if (done.role !== "assistant") break;
          if (done.stopReason === "aborted") aborted = true;
          usages.push(done.usage);
          lastError =
            done.stopReason === "error"
              ? // The Retry-After failFastFetch added is ours, not the model's: not in the message.
                (done.errorMessage ?? "the model call failed").replace(/\s*retry-after-ms=\d+/, "")
              : undefined;
          break;
        }
        case "tool_execution_start":
        case "tool_execution_end":
          options.onTool?.({
            phase: event.type === "tool_execution_start" ? "start" : "end",
            callId: event.toolCallId,
            name: event.toolName,
            ...(event.type === "tool_execution_end" ? { isError: event.isError === true } : {}),
          });
          break;
      }
    });
    const onAbort = () => agent.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await agent.prompt(input);
    } catch (error) {
      if (!options.signal?.aborted) return { outcome: "failed", error: (error as Error).message, text };
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      unsubscribe();
      this.#save(agent.state.messages);
    }
    if (options.signal?.aborted || aborted) return { outcome: "cancelled", text };
    if (lastError !== undefined) return { outcome: "failed", error: lastError, text };
    return { outcome: "succeeded", text, usage: summedUsage(usages) };
  }

  #load(): AgentMessage[] {
    try {
      return JSON.parse(readFileSync(this.#file, "utf8")) as AgentMessage[];
    } catch {
      return [];
    }
  }

  /** Written whole and renamed into place: a workload killed mid-write keeps the previous one. */
  #save(messages: AgentMessage[]): void {
    const tmp = `${this.#file}.tmp`;
    writeFileSync(tmp, JSON.stringify(messages), { mode: 0o600 });
    renameSync(tmp, this.#file);
  }

  get settings(): CompassSettings {
    return this.#settings;
  }
}
