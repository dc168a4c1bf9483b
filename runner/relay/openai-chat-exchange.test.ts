import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResultRecord, StreamEvent } from "../../contracts/adapter.ts";
import { type ModelServer, startModelServer } from "../../test/fixtures/model-server.ts";
import { type Harness, startOpenAIChatHarness } from "../../test/fixtures/openai-chat-harness.ts";
import { Relays } from "./relay.ts";

let model: ModelServer;
let dataDir: string;
let harness: Harness;
const env = () => ({
  SYMPOZIUM_HARNESS_CONTRACT_VERSION: "v1alpha2",
  MODEL_BASE_URL: `${model.url}/v1`,
  MODEL_API_KEY: "k",
  MODEL_NAME: "tiny",
});

beforeAll(async () => {
  model = await startModelServer();
  dataDir = mkdtempSync(join(tmpdir(), "openai-chat-harness-"));
  harness = await startOpenAIChatHarness({ env: env(), dataDir });
});
afterAll(async () => {
  await harness?.close();
  await model?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** One relay to the harness, as the runner makes it; what the server would be sent. */
async function relay(id: string, input: string, stream: boolean) {
  const chunks: { data: string; done: boolean; status?: number | undefined }[] = [];
  const target = { endpoint: new URL(harness.url).host, token: "t", protocol: "openai-chat" as const };
  const { status } = await new Relays().relay(id, target, { id, input, stream }, 10_000, {
    chunk: (data, done, s) => chunks.push({ data, done, status: s }),
    buffered: () => 0,
  });
  return {
    status,
    first: chunks[0]?.status,
    body: chunks.map((c) => c.data).join(""),
    done: chunks.at(-1)?.done,
  };
}

const events = (body: string) =>
  body
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => StreamEvent.parse(JSON.parse(e.slice("data: ".length))));

describe("relaying to a harness of the openai-chat session contract", () => {
  it("a whole reply becomes our result record, with the harness's usage", async () => {
    const reply = await relay("r-1", "remember tok-42", false);
    expect(reply).toMatchObject({ status: 200, first: 200, done: true });
    expect(ResultRecord.parse(JSON.parse(reply.body))).toMatchObject({
      id: "r-1",
      outcome: "succeeded",
      output: "OK, I will remember tok-42.",
      usage: { input_tokens: expect.any(Number), output_tokens: expect.any(Number) },
    });
  });

  it("a streamed reply becomes delta events and a result; the harness kept the conversation", async () => {
    const reply = await relay("r-2", "what token did I give you?", true);
    expect(reply.first).toBe(200);
    const all = events(reply.body);
    const deltas = all.filter((e) => e.type === "delta").map((e) => (e.type === "delta" ? e.text : ""));
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join("")).toBe("The token is tok-42.");
    const last = all.at(-1);
    expect(last?.type).toBe("result");
    if (last?.type === "result")
      expect(last.result).toMatchObject({ id: "r-2", outcome: "succeeded", output: "The token is tok-42." });
  });

  it("the conversation is the harness's data directory's: a harness started again over it remembers", async () => {
    await harness.close();
    harness = await startOpenAIChatHarness({ env: env(), dataDir });
    const reply = await relay("r-3", "what token did I give you?", false);
    expect(JSON.parse(reply.body).output).toBe("The token is tok-42.");
  });

  it("a model failure is a failed result record answered 502, carrying the harness's message", async () => {
    const reply = await relay("r-4", "[fail] now", false);
    expect(reply.first).toBe(502);
    expect(ResultRecord.parse(JSON.parse(reply.body))).toMatchObject({
      id: "r-4",
      outcome: "failed",
      usage: "unavailable",
      error: expect.stringMatching(/HTTP 502: the model answered HTTP 500/),
    });
  });

  it("the harness refuses to start without SYMPOZIUM_HARNESS_CONTRACT_VERSION=v1alpha2", async () => {
    await expect(startOpenAIChatHarness({ env: {}, dataDir })).rejects.toThrow(
      /unset; this harness speaks v1alpha2 only/,
    );
    await expect(
      startOpenAIChatHarness({ env: { SYMPOZIUM_HARNESS_CONTRACT_VERSION: "v1alpha1" }, dataDir }),
    ).rejects.toThrow(/"v1alpha1"/);
  });
});
