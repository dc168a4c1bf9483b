/**
 * The reference one-shot entry (contract v1alpha1, contracts/agent-run.ts): reads its input from
 * AGENT_INPUT, asks the model once (MODEL_BASE_URL + MODEL_API_KEY, the Agent's allowed
 * credential), writes one result record as the last stdout line and exits — 0 when it
 * succeeded, 1 when not. Nothing stays behind: a run has no session and no volume.
 */
import { ONE_SHOT_INPUT_ENV } from "../../contracts/agent-run.ts";
import type { ResultRecord, Usage } from "../../contracts/adapter.ts";

const input = process.env[ONE_SHOT_INPUT_ENV] ?? "";
const baseUrl = process.env.MODEL_BASE_URL ?? "";
const startedAt = new Date().toISOString();

function usageOf(u: { prompt_tokens?: number; completion_tokens?: number } | null | undefined): Usage {
  if (!u || typeof u.prompt_tokens !== "number" || typeof u.completion_tokens !== "number")
    return "unavailable";
  return { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens };
}

async function ask(): Promise<{ text: string; usage: Usage }> {
  if (!input) throw new Error(`no input (${ONE_SHOT_INPUT_ENV} is empty)`);
  if (!baseUrl) throw new Error("no model endpoint configured (the Agent allows no credential)");
  const res = await fetch(`${baseUrl.replace(/\/$/, "")}/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${process.env.MODEL_API_KEY ?? ""}`,
    },
    body: JSON.stringify({
      model: process.env.MODEL_NAME ?? "reference-model",
      messages: [{ role: "user", content: input }],
    }),
    redirect: "error",
    signal: AbortSignal.timeout(Number(process.env.ONE_SHOT_TIMEOUT_MS ?? 60_000)),
  });
  if (!res.ok) throw new Error(`model endpoint answered ${res.status}`);
  const body = (await res.json()) as {
    choices?: { message?: { content?: string } }[];
    usage?: { prompt_tokens?: number; completion_tokens?: number };
  };
  return { text: body.choices?.[0]?.message?.content ?? "", usage: usageOf(body.usage) };
}

let result: ResultRecord;
try {
  const reply = await ask();
  result = {
    id: "one-shot",
    outcome: "succeeded",
    output: reply.text,
    usage: reply.usage,
    started_at: startedAt,
    finished_at: new Date().toISOString(),
  };
} catch (error) {
  result = {
    id: "one-shot",
    outcome: "failed",
    error: (error as Error).message,
    usage: "unavailable",
    started_at: startedAt,
    finished_at: new Date().toISOString(),
  };
}
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exitCode = result.outcome === "succeeded" ? 0 : 1;
