/**
 * The demo the README's run command ends with: an Agent bound to the reference runtime, with
 * the loopback model as its allowed endpoint, a HarnessSession for it, and two requests through
 * the proxy — the second one only answers right if the session kept what the first one said.
 * Then a real harness: a session of the `pi` runtime (the Pi coding agent) writes a file in its
 * workspace through a tool call, is stopped (its workload goes, its volume stays) and resumed,
 * and reads the file back through another tool call. Everything through the typed client
 * (client/, the package `@agent-sessions/client`): `put`, `waitFor`, `send`, `sendStreaming`.
 */
import { AgentSessionsClient, ClientError } from "../client/index.ts";

const [url = "http://127.0.0.1:8787", token = "", modelUrl = "http://10.213.0.1:11434/v1"] =
  process.argv.slice(2);
const model = new URL(modelUrl);
const client = new AgentSessionsClient({ baseUrl: url, token });

/** Waits for `phase` (the client's waitFor: settled, Failed is an error); returns how long it took. */
async function waitFor(name: string, phase: "Ready" | "Stopped"): Promise<string> {
  const started = Date.now();
  await client.waitFor("default", name, phase, { timeoutMs: 180_000 });
  return `${((Date.now() - started) / 1000).toFixed(1)} s`;
}

/** A streamed request: tool events as they happen, then the answer. */
async function askStreamed(name: string, input: string): Promise<void> {
  process.stdout.write(`you:   ${input}\n`);
  for await (const event of client.sendStreaming("default", name, input)) {
    if (event.type === "tool")
      process.stdout.write(`       [tool ${String(event.name)} ${String(event.phase)}]\n`);
    if (event.type === "result") {
      const result = event.result;
      process.stdout.write(
        `agent: ${String(result.output ?? result.error)}   (usage ${JSON.stringify(result.usage)})\n`,
      );
    }
  }
}

/** An Agent on `runtimeRef` whose key the server reads from DEMO_MODEL_API_KEY (scripts/run offers it). */
const agent = (name: string, runtimeRef: string) => ({
  apiVersion: "agent-sessions.dev/v1alpha1" as const,
  kind: "Agent" as const,
  metadata: { name },
  spec: {
    runtimeRef,
    // The manifest never carries the key: AGENT_SESSIONS_CREDENTIAL_ENV offers the variable.
    credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "DEMO_MODEL_API_KEY" } }],
    model: { baseUrl: modelUrl, name: "demo-model" },
    egress: [{ cidr: model.hostname, port: Number(model.port) }],
  },
});
const session = (name: string, agentRef: string, runtimeRef: string) => ({
  apiVersion: "agent-sessions.dev/v1alpha1" as const,
  kind: "HarnessSession" as const,
  metadata: { name },
  spec: { agentRef, runtimeRef, desiredState: "running" as const, idleTimeout: "15m" },
});

await client.put("agents", agent("demo", "reference"));
await client.put("harnesssessions", session("demo", "demo", "reference"));
process.stdout.write("demo: HarnessSession default/demo created; waiting for Ready …\n");
process.stdout.write(`demo: Ready in ${await waitFor("demo", "Ready")}\n`);
for (const input of ["remember banana-42", "what token did I ask you to remember?"]) {
  const reply = await client.send("default", "demo", input);
  process.stdout.write(
    `you:   ${input}\nagent: ${String(reply.output)}   (usage ${JSON.stringify(reply.usage)})\n`,
  );
}

try {
  await client.get("agentruntimes", "default", "pi");
} catch (error) {
  if (!(error instanceof ClientError) || error.code !== "NOT_FOUND") throw error;
  process.stdout.write(
    "demo: AgentRuntime default/pi is not registered (scripts/testbed up pi-image builds its image)\n",
  );
  process.exit(0);
}
await client.put("agents", agent("demo-pi", "pi"));
await client.put("harnesssessions", session("demo-pi", "demo-pi", "pi"));
process.stdout.write(
  "demo: HarnessSession default/demo-pi (the Pi coding agent) created; waiting for Ready …\n",
);
process.stdout.write(`demo: Ready in ${await waitFor("demo-pi", "Ready")}\n`);
await askStreamed("demo-pi", "write file notes/plan.txt with content ship the pi runtime");
await client.patch("harnesssessions", "default", "demo-pi", { spec: { desiredState: "stopped" } });
process.stdout.write(
  `demo: stopped in ${await waitFor("demo-pi", "Stopped")} (no workload; the volume is kept)\n`,
);
await client.patch("harnesssessions", "default", "demo-pi", { spec: { desiredState: "running" } });
process.stdout.write(`demo: resumed, Ready in ${await waitFor("demo-pi", "Ready")}\n`);
await askStreamed("demo-pi", "what is in file notes/plan.txt?");
