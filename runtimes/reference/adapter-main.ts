/**
 * The reference v1alpha2 adapter (contracts/adapter.ts). Runs as the session container's main
 * process and fronts an agent that talks to an OpenAI-compatible model endpoint given by the
 * Agent's allowed credential (MODEL_BASE_URL + MODEL_API_KEY). Conversation state lives on the
 * session volume, so a session stopped and resumed remembers what it was told.
 *
 * The reference runtime is the tests' runtime: an input of exactly `reference-fault:endless-error`
 * makes it the adapter gone wrong, answering HTTP 500 with a body that never ends (until the
 * connection goes), so the tests can show the runner and the server bound it.
 */
import { readFileSync, writeFileSync } from "node:fs";
import type { ServerResponse } from "node:http";
import type { Usage } from "../../contracts/adapter.ts";
import type { AgentReply } from "../kit/adapter-server.ts";
import { adapterTokenOutOfEnvironment } from "../kit/adapter-token.ts";

// Before anything else, and before the rest of the adapter is loaded: from here on the token is
// in this process's memory only, and the handover re-executes this process, which would load
// every module imported above it twice.
adapterTokenOutOfEnvironment();
const { adapterEnv, startAdapterServer } = await import("../kit/adapter-server.ts");
const { sessionSkillFiles, skillsPrompt } = await import("../kit/skills.ts");

const adapter = adapterEnv();
const env = {
  modelBaseUrl: process.env.MODEL_BASE_URL ?? "",
  modelApiKey: process.env.MODEL_API_KEY ?? "",
  model: process.env.MODEL_NAME ?? "reference-model",
};
const conversationFile = `${adapter.workspace}/conversation.json`;
/** The session's skills (runtimes/kit/skills.ts), told to the model as a system message; none: no message. */
const skills = skillsPrompt(sessionSkillFiles());

type Message = { role: "user" | "assistant" | "system"; content: string };
function loadConversation(): Message[] {
  try {
    return JSON.parse(readFileSync(conversationFile, "utf8")) as Message[];
  } catch {
    return [];
  }
}

/** Calls the model; when `onDelta` is given, asks for a streamed reply and forwards deltas. */
async function callModel(
  messages: Message[],
  signal: AbortSignal,
  onDelta?: (t: string) => void,
): Promise<AgentReply> {
  if (!env.modelBaseUrl) throw new Error("no model endpoint configured (the Agent allows no credential)");
  const res = await fetch(`${env.modelBaseUrl.replace(/\/$/, "")}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${env.modelApiKey}` },
    body: JSON.stringify({
      model: env.model,
      messages,
      stream: Boolean(onDelta),
      ...(onDelta ? { stream_options: { include_usage: true } } : {}),
    }),
    signal,
    redirect: "error",
  });
  if (!res.ok) throw new Error(`model endpoint answered ${res.status}`);
  if (!onDelta) {
    const body = (await res.json().catch(() => {
      throw new Error("the model's reply is not JSON");
    })) as {
      choices?: { message?: { content?: string } }[];
      usage?: { prompt_tokens?: number; completion_tokens?: number };
    };
    const content = body.choices?.[0]?.message?.content;
    if (typeof content !== "string") throw new Error("the model's reply carries no message content");
    return { text: content, usage: usageOf(body.usage) };
  }
  let text = "";
  let usage: Usage = "unavailable";
  let finished = false;
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    const lines = buffer.split("\n");
    buffer = lines.pop() ?? "";
    for (const line of lines) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") {
        finished = true;
        continue;
      }
      const event = parseEvent(data) as {
        choices?: { delta?: { content?: string }; finish_reason?: string | null }[];
        usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
      };
      const delta = event.choices?.[0]?.delta?.content;
      if (delta) {
        text += delta;
        onDelta(delta);
      }
      if (event.choices?.[0]?.finish_reason) finished = true;
      if (event.usage) usage = usageOf(event.usage);
    }
  }
  // A stream cut before the model said it finished is a failed call, never a (partial) answer.
  if (!finished) throw new Error("the model's stream ended before the reply finished");
  return { text, usage };
}

function parseEvent(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    throw new Error(`the model sent a stream event that is not JSON (${data.length} bytes)`);
  }
}

function usageOf(u: { prompt_tokens?: number; completion_tokens?: number } | null | undefined): Usage {
  if (!u || typeof u.prompt_tokens !== "number" || typeof u.completion_tokens !== "number")
    return "unavailable";
  return { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens };
}

/** The input that makes this adapter answer 500 with an endless body (see the header). */
const ENDLESS_ERROR_FAULT = "reference-fault:endless-error";

function endlessError(res: ServerResponse): void {
  res.writeHead(500, { "content-type": "application/json" });
  res.write('{"code":"INTERNAL","message":"');
  const piece = Buffer.alloc(64 * 1024, 0x65);
  const pump = () => {
    while (!res.destroyed && res.write(piece));
    if (!res.destroyed) res.once("drain", pump);
  };
  pump();
}

startAdapterServer({
  ...adapter,
  intercept(request, res) {
    if (request.input !== ENDLESS_ERROR_FAULT) return false;
    endlessError(res);
    return true;
  },
  async handle(input, { signal, onDelta }) {
    const messages: Message[] = [...loadConversation(), { role: "user", content: input }];
    const system: Message[] = skills ? [{ role: "system", content: skills }] : [];
    const reply = await callModel([...system, ...messages], signal, onDelta);
    writeFileSync(
      conversationFile,
      JSON.stringify([...messages, { role: "assistant", content: reply.text }]),
    );
    return reply;
  },
});
