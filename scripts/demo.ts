/**
 * The demo the README's run command ends with: an Agent bound to the reference runtime, with
 * the loopback model as its allowed endpoint, a HarnessSession for it, and two requests through
 * the proxy — the second one only answers right if the session kept what the first one said.
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
const started = Date.now();
for (;;) {
  const hs = await call("GET", "/v1/namespaces/default/harnesssessions/demo");
  const status = hs.status as
    | { phase?: string; conditions?: { reason?: string; message?: string }[] }
    | undefined;
  if (status?.phase === "Ready") break;
  if (status?.phase === "Failed") throw new Error(`session failed: ${JSON.stringify(status.conditions)}`);
  if (Date.now() - started > 180_000) throw new Error("session not Ready within 180 s");
  await new Promise((r) => setTimeout(r, 500));
}
process.stdout.write(`demo: Ready in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
for (const input of ["remember banana-42", "what token did I ask you to remember?"]) {
  const reply = await call("POST", "/v1/namespaces/default/harnesssessions/demo/requests", { input });
  process.stdout.write(
    `you:   ${input}\nagent: ${String(reply.output)}   (usage ${JSON.stringify(reply.usage)})\n`,
  );
}
