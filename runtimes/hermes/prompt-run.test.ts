import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { AcpClient } from "./acp-client.ts";
import { hermesAgentSettings, hermesConfig, startHermes } from "./hermes-agent.ts";
import type { ToolEvent } from "../kit/turn.ts";
import { runPrompt, usageOf } from "./prompt-run.ts";

const fakeHermes = fileURLToPath(new URL("../../test/fixtures/fake-hermes-acp.ts", import.meta.url));
const clients: AcpClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.stop(500);
});
function start(): AcpClient {
  const acp = new AcpClient({
    command: [process.execPath, fakeHermes],
    cwd: process.cwd(),
    env: process.env,
  });
  clients.push(acp);
  return acp;
}

describe("one prompt through hermes acp", () => {
  it("streams the answer, reports the tool call by its name, and takes the turn's usage", async () => {
    const acp = start();
    const deltas: string[] = [];
    const tools: ToolEvent[] = [];
    const outcome = await runPrompt(acp, "s-new", "two turns", {
      onDelta: (d) => deltas.push(d),
      onTool: (t) => tools.push(t),
    });
    // The blank line Hermes puts before the text after a tool call is not part of the answer.
    expect(outcome).toEqual({
      outcome: "succeeded",
      text: "Wrote a.txt",
      usage: { input_tokens: 22, output_tokens: 3 },
    });
    expect(deltas.join("")).toBe("Wrote a.txt");
    expect(tools).toEqual([
      { phase: "start", callId: "tc-1", name: "write_file" },
      { phase: "end", callId: "tc-1", name: "write_file", isError: false },
    ]);
  });

  it("splits lines on LF only: U+2028 inside a JSON string stays in the text", async () => {
    expect(await runPrompt(start(), "s-new", "hello")).toMatchObject({
      outcome: "succeeded",
      text: "you said: hello \u2028 end",
    });
  });

  it("records usage the model did not report (0 tokens) as unavailable, never as zero", async () => {
    expect(await runPrompt(start(), "s-new", "no usage")).toEqual({
      outcome: "succeeded",
      text: "quiet",
      usage: "unavailable",
    });
    expect(usageOf(undefined)).toBe("unavailable");
    expect(usageOf({ inputTokens: 7, outputTokens: 0 })).toEqual({ input_tokens: 7, output_tokens: 0 });
  });

  it("fails with the model's error when the turn is marked failed", async () => {
    expect(await runPrompt(start(), "s-new", "fail")).toEqual({
      outcome: "failed",
      error: "HTTP 500: boom",
      text: "",
    });
  });

  it("cancels with session/cancel and keeps what streamed before", async () => {
    const controller = new AbortController();
    const run = runPrompt(start(), "s-new", "hang", {
      signal: controller.signal,
      onDelta: () => controller.abort(),
    });
    expect(await run).toEqual({ outcome: "cancelled", text: "partial" });
  });

  it("gives up on an agent that never ends its turn after session/cancel", async () => {
    const controller = new AbortController();
    const run = runPrompt(start(), "s-new", "deaf", {
      signal: controller.signal,
      onDelta: () => controller.abort(),
      cancelGraceMs: 50,
    });
    expect(await run).toEqual({ outcome: "cancelled", text: "partial" });
  });

  it("fails the request when the agent exits during it, and later requests fail too", async () => {
    const acp = start();
    expect(await runPrompt(acp, "s-new", "die")).toMatchObject({
      outcome: "failed",
      error: "the hermes agent exited during the request",
    });
    expect(await acp.exited).toBe(3);
    expect((await acp.request("session/new")).ok).toBe(false);
  });
});

describe("starting hermes for a session", () => {
  const settingsIn = (workspace: string) =>
    hermesAgentSettings({
      AGENT_WORKSPACE: workspace,
      MODEL_BASE_URL: "http://10.0.0.1:1/v1",
      MODEL_NAME: "tiny",
      HERMES_PYTHON: process.execPath,
      HERMES_LAUNCHER: fakeHermes,
    });

  it("writes config.yaml naming the key's variable (never its value), the endpoint and a context length", () => {
    const settings = settingsIn("/workspace");
    expect(settings.home).toBe("/workspace/.hermes");
    const config = JSON.parse(hermesConfig(settings, { MODEL_API_KEY: "sk-live-0123456789" }));
    expect(config.model).toEqual({
      provider: "custom",
      base_url: "http://10.0.0.1:1/v1",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Hermes' own `${VAR}` reference, expanded by Hermes
      api_key: "${MODEL_API_KEY}",
      default: "tiny",
      context_length: 131072,
    });
    expect(JSON.stringify(config)).not.toContain("sk-live");
    expect(config.security).toEqual({ allow_lazy_installs: false });
  });

  it("opens a new session the first time, loads the kept one after, and grants permission requests", async () => {
    const workspace = mkdtempSync(join(tmpdir(), "hermes-ws-"));
    const settings = settingsIn(workspace);
    const first = await startHermes(settings, "harness", { MODEL_API_KEY: "sk-live-0123456789" });
    clients.push(first.acp);
    expect(first).toMatchObject({ sessionId: "s-new", resumed: false });
    expect(JSON.parse(readFileSync(join(settings.home, "agent-sessions.json"), "utf8"))).toEqual({
      harness: "s-new",
    });
    expect(await runPrompt(first.acp, first.sessionId, "ask")).toMatchObject({
      outcome: "succeeded",
      text: "permission: allow_once",
    });
    await first.acp.stop(500);

    // A kept session the agent knows is loaded; one it does not know is replaced by a new one.
    writeFileSync(join(settings.home, "state.db"), "");
    writeFileSync(join(settings.home, "agent-sessions.json"), JSON.stringify({ harness: "s-known" }));
    const again = await startHermes(settings, "harness", {});
    clients.push(again.acp);
    expect(again).toMatchObject({ sessionId: "s-known", resumed: true });
    writeFileSync(join(settings.home, "agent-sessions.json"), JSON.stringify({ harness: "s-gone" }));
    const fresh = await startHermes(settings, "harness", {});
    clients.push(fresh.acp);
    expect(fresh).toMatchObject({ sessionId: "s-new", resumed: false });
  });
});
