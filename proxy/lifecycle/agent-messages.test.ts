import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type CommandHandler, defaultHandler } from "../testing/fake-runner.ts";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

let t: TestServer;
beforeEach(async () => {
  t = await startTestServer();
});
afterEach(async () => {
  await t.close();
});

async function readySession(handler?: CommandHandler) {
  const runner = await t.runner(handler ? { handler } : {});
  const provisioned = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "r1" });
  const container = provisioned.body.container_name as string;
  const started = await t.rpc("StartAgentSession", { container_name: container });
  return { runner, container, sessionId: started.body.session_id as string };
}

const message = { type: "message", text: "hi" };

describe("SendAgentMessage", () => {
  it("relays the message to the runner's send as one JSON line", async () => {
    const { runner, sessionId } = await readySession();
    const res = await t.rpc("SendAgentMessage", { session_id: sessionId, message });
    expect(res.body).toEqual({ session_id: sessionId, state: "READY", wake: "none" });
    expect(runner.commandsOf("send")).toEqual([
      { kind: "send", session_id: sessionId, line: JSON.stringify(message) },
    ]);
  });

  it("wakes a STOPPED session with a start that resumes it, then delivers", async () => {
    const { runner, sessionId } = await readySession();
    await t.rpc("StopAgentSession", { session_id: sessionId });
    const res = await t.rpc("SendAgentMessage", { session_id: sessionId, message });
    expect(res.body).toEqual({ session_id: sessionId, state: "READY", wake: "started" });
    expect(runner.commandsOf("start").at(-1)).toMatchObject({ session_id: sessionId, resume: true });
    expect(runner.commandsOf("provision")).toHaveLength(1);
    expect(runner.commandsOf("send")).toHaveLength(1);
  });

  it("re-provisions the workspace when the wake's start meets NOT_FOUND, retries the start, then delivers; never ERRORED", async () => {
    let containerGone = false;
    const { runner, container, sessionId } = await readySession((command) => {
      if (command.kind === "start" && containerGone)
        return { ok: false, error: { code: "NOT_FOUND", message: "no container" } };
      if (command.kind === "provision") containerGone = false;
      return defaultHandler(command);
    });
    await t.rpc("StopAgentSession", { session_id: sessionId });
    containerGone = true;
    const events = await t.events(`?session_id=${sessionId}`, "0");
    const res = await t.rpc("SendAgentMessage", { session_id: sessionId, message });
    expect(res.body).toEqual({ session_id: sessionId, state: "READY", wake: "reprovisioned" });
    expect(runner.commandsOf("provision").map((c) => c.container_name)).toEqual([container, container]);
    expect(runner.commandsOf("start")).toHaveLength(3);
    expect(runner.commandsOf("send")).toHaveLength(1);
    type StatusFrame = { type: string; payload: { state?: string; reason?: string } };
    const statuses = () => events.frames<StatusFrame>().filter((f) => f.type === "status");
    await events.until(() => statuses().length >= 8);
    const states = statuses().map((f) => [f.payload.state, f.payload.reason].filter(Boolean).join(":"));
    expect(states).toEqual([
      "STARTING",
      "READY",
      "STOPPING:Stopped",
      "STOPPED:Stopped",
      "STARTING",
      "STOPPED:ContainerNotFound",
      "STARTING",
      "READY",
    ]);
  });

  it("never wakes an ERRORED session: FAILED_PRECONDITION, nothing sent", async () => {
    const { runner, sessionId } = await readySession();
    runner.state(sessionId, "ERRORED", "AgentExited(3)");
    for (let i = 0; i < 100; i++) {
      const status = await t.rpc("GetAgentStatus", { session_id: sessionId });
      if ((status.body.sessions as { state: string }[])[0]?.state === "ERRORED") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const res = await t.rpc("SendAgentMessage", { session_id: sessionId, message });
    expect(res.status).toBe(412);
    expect(res.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      message: "session errored; reload or stop it",
    });
    expect(runner.commandsOf("send")).toHaveLength(0);
    expect(runner.commandsOf("start")).toHaveLength(1);
  });

  it("marks a READY session the runner does not hold ERRORED LostByRunner", async () => {
    const { sessionId } = await readySession((command) =>
      command.kind === "send"
        ? { ok: false, error: { code: "NOT_FOUND", message: "not held" } }
        : defaultHandler(command),
    );
    const res = await t.rpc("SendAgentMessage", { session_id: sessionId, message });
    expect(res.status).toBe(412);
    const status = await t.rpc("GetAgentStatus", { session_id: sessionId });
    expect(status.body.sessions).toMatchObject([{ state: "ERRORED", reason: "LostByRunner" }]);
  });

  it("answers NOT_FOUND for an unknown session and INVALID_ARGUMENT for a message that is not one JSON object", async () => {
    await t.runner();
    expect((await t.rpc("SendAgentMessage", { session_id: "ses-nope", message })).status).toBe(404);
    const bad = await t.rpc("SendAgentMessage", { session_id: "ses-nope", message: ["crash"] });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({
      code: "INVALID_ARGUMENT",
      details: { field_violations: [{ field: "message" }] },
    });
  });
});
