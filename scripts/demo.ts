/**
 * The demo the README's run command ends with: an Agent bound to the reference runtime, with
 * the loopback model as its allowed endpoint, a HarnessSession for it, and two requests through
 * the proxy — the second one only answers right if the session kept what the first one said.
 * Then a real harness: a session of the `pi` runtime (the Pi coding agent) writes a file in its
 * workspace through a tool call, is stopped (its workload goes, its volume stays) and resumed,
 * and reads the file back through another tool call.
 */
const [url = "http://127.0.0.1:8787", token = "", modelUrl = "http://10.213.0.1:11434/v1"] =
  process.argv.slice(2);
const model = new URL(modelUrl);
const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };

async function call(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers,
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

type Status = { phase?: string; conditions?: { reason?: string; message?: string }[] };

/** Polls a HarnessSession until it reaches `phase`; returns how long that took. */
async function waitFor(name: string, phase: string): Promise<string> {
  const started = Date.now();
  for (;;) {
    const hs = await call("GET", `/v1/namespaces/default/harnesssessions/${name}`);
    const status = hs.status as Status | undefined;
    if (status?.phase === phase) return `${((Date.now() - started) / 1000).toFixed(1)} s`;
    if (status?.phase === "Failed") throw new Error(`session failed: ${JSON.stringify(status.conditions)}`);
    if (Date.now() - started > 180_000) throw new Error(`session ${name} not ${phase} within 180 s`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** A streamed request: tool events as they happen, then the answer. */
async function askStreamed(name: string, input: string): Promise<void> {
  process.stdout.write(`you:   ${input}\n`);
  const res = await fetch(`${url}/v1/namespaces/default/harnesssessions/${name}/requests`, {
    method: "POST",
    headers,
    body: JSON.stringify({ input, stream: true }),
  });
  if (!res.ok || !res.body) throw new Error(`request: ${res.status} ${await res.text()}`);
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(piece, { stream: true });
    for (let i = buffer.indexOf("\n\n"); i >= 0; i = buffer.indexOf("\n\n")) {
      const data = buffer.slice(0, i).match(/^data: (.*)$/m)?.[1];
      buffer = buffer.slice(i + 2);
      const event = data ? (JSON.parse(data) as Record<string, unknown>) : {};
      if (event.type === "tool")
        process.stdout.write(`       [tool ${String(event.name)} ${String(event.phase)}]\n`);
      if (event.type === "result") {
        const result = event.result as Record<string, unknown>;
        process.stdout.write(
          `agent: ${String(result.output ?? result.error)}   (usage ${JSON.stringify(result.usage)})\n`,
        );
      }
    }
  }
}

await call("PUT", "/v1/namespaces/default/agents/demo", {
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "Agent",
  metadata: { name: "demo" },
  spec: {
    runtimeRef: "reference",
    // Read by the server from DEMO_MODEL_API_KEY, which scripts/run offers to sessions
    // (AGENT_SESSIONS_CREDENTIAL_ENV); the manifest never carries the key.
    credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "DEMO_MODEL_API_KEY" } }],
    model: { baseUrl: modelUrl, name: "demo-model" },
    egress: [{ cidr: model.hostname, port: Number(model.port) }],
  },
});
await call("PUT", "/v1/namespaces/default/harnesssessions/demo", {
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "HarnessSession",
  metadata: { name: "demo" },
  spec: { agentRef: "demo", runtimeRef: "reference", desiredState: "running", idleTimeout: "15m" },
});
process.stdout.write("demo: HarnessSession default/demo created; waiting for Ready …\n");
process.stdout.write(`demo: Ready in ${await waitFor("demo", "Ready")}\n`);
for (const input of ["remember banana-42", "what token did I ask you to remember?"]) {
  const reply = await call("POST", "/v1/namespaces/default/harnesssessions/demo/requests", { input });
  process.stdout.write(
    `you:   ${input}\nagent: ${String(reply.output)}   (usage ${JSON.stringify(reply.usage)})\n`,
  );
}

const pi = await fetch(`${url}/v1/namespaces/default/agentruntimes/pi`, { headers });
if (pi.status !== 200) {
  process.stdout.write(
    "demo: AgentRuntime default/pi is not registered (scripts/testbed up pi-image builds its image)\n",
  );
  process.exit(0);
}
await call("PUT", "/v1/namespaces/default/agents/demo-pi", {
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "Agent",
  metadata: { name: "demo-pi" },
  spec: {
    runtimeRef: "pi",
    credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "DEMO_MODEL_API_KEY" } }],
    model: { baseUrl: modelUrl, name: "demo-model" },
    egress: [{ cidr: model.hostname, port: Number(model.port) }],
  },
});
await call("PUT", "/v1/namespaces/default/harnesssessions/demo-pi", {
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "HarnessSession",
  metadata: { name: "demo-pi" },
  spec: { agentRef: "demo-pi", runtimeRef: "pi", desiredState: "running", idleTimeout: "15m" },
});
process.stdout.write(
  "demo: HarnessSession default/demo-pi (the Pi coding agent) created; waiting for Ready …\n",
);
process.stdout.write(`demo: Ready in ${await waitFor("demo-pi", "Ready")}\n`);
await askStreamed("demo-pi", "write file notes/plan.txt with content ship the pi runtime");
await call("PATCH", "/v1/namespaces/default/harnesssessions/demo-pi", { spec: { desiredState: "stopped" } });
process.stdout.write(
  `demo: stopped in ${await waitFor("demo-pi", "Stopped")} (no workload; the volume is kept)\n`,
);
await call("PATCH", "/v1/namespaces/default/harnesssessions/demo-pi", { spec: { desiredState: "running" } });
process.stdout.write(`demo: resumed, Ready in ${await waitFor("demo-pi", "Ready")}\n`);
await askStreamed("demo-pi", "what is in file notes/plan.txt?");
