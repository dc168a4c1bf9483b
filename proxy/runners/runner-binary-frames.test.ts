import { afterEach, describe, expect, it } from "vitest";
import {
  BINARY_FRAMES_CAPABILITY,
  BinaryKind,
  decodeBinaryFrame,
  encodeBinaryFrame,
} from "../../contracts/runner-binary.ts";
import { type RunnerCommand, UPLOAD_WINDOW_CAPABILITY } from "../../contracts/runner-protocol.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";
import type { CommandHandler, FakeRunner } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** Files kept by the fake runner, written from pieces as they come (raw frames or base64). */
function filesRunner(options: { binary: boolean; noise?: (r: FakeRunner, relayId: string) => void }) {
  const files = new Map<string, Buffer>();
  const staged = new Map<string, Buffer[]>();
  let runner!: FakeRunner;
  const handler: CommandHandler = (c: RunnerCommand) => {
    switch (c.kind) {
      case "provision":
        return { ok: true, result: { container_name: c.container_name, endpoint: "10.213.0.9:8080" } };
      case "start":
        return { ok: true, result: { state: "READY" } };
      case "workspace_write": {
        const envelope = runner.received.findLast((m) => m.type === "command");
        const frame = runner.binary.at(-1);
        const bytes =
          c.data_frame && frame
            ? (() => {
                const parsed = decodeBinaryFrame(frame.bytes);
                if (!parsed.ok || envelope?.type !== "command") throw new Error("no frame");
                // The frame names the command it belongs to, and came just before it.
                expect(parsed.frame.id).toBe(envelope.payload.command_id);
                expect(frame.after).toBe(runner.received.length - 1);
                return parsed.frame.data;
              })()
            : Buffer.from(c.data, "base64");
        staged.set(c.upload_id, [...(staged.get(c.upload_id) ?? []), Buffer.from(bytes)]);
        if (c.done) files.set(c.path, Buffer.concat(staged.get(c.upload_id) ?? []));
        return { ok: true, result: { size: bytes.length } };
      }
      case "workspace_read": {
        const content = files.get(c.path) ?? Buffer.alloc(0);
        options.noise?.(runner, c.relay_id);
        for (let i = 0; i < content.length; i += WORKSPACE_CHUNK_BYTES) {
          const piece = content.subarray(i, i + WORKSPACE_CHUNK_BYTES);
          if (options.binary) runner.ws.send(encodeBinaryFrame(BinaryKind.relayChunk, c.relay_id, piece));
          else
            runner.send({
              version: 1,
              type: "relay_chunk",
              payload: { relay_id: c.relay_id, data: piece.toString("base64"), done: false },
            });
        }
        if (options.binary)
          runner.ws.send(encodeBinaryFrame(BinaryKind.relayChunk, c.relay_id, Buffer.alloc(0), true));
        else
          runner.send({
            version: 1,
            type: "relay_chunk",
            payload: { relay_id: c.relay_id, data: "", done: true },
          });
        return { ok: true, result: { size: content.length } };
      }
      default:
        return { ok: true, result: {} };
    }
  };
  return {
    files,
    handler,
    attach: (r: FakeRunner) => {
      runner = r;
    },
  };
}

async function workspaceOn(server: TestServer): Promise<string> {
  const provisioned = await server.rpc("ProvisionAgentWorkspace", {
    agent_ref: "alice",
    client_request_id: "req-1",
  });
  expect(provisioned.status).toBe(200);
  return provisioned.body.container_name as string;
}

async function http(server: TestServer, method: string, path: string, body?: Uint8Array) {
  const res = await fetch(`${server.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    ...(body ? { body } : {}),
  });
  return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()) };
}

const content = Buffer.from(Array.from({ length: WORKSPACE_CHUNK_BYTES * 2 + 17 }, (_, i) => (i * 7) % 256));

describe("§9 binary frames on the runner link", () => {
  it("a runner that announced them gets upload pieces raw before their commands, and sends download pieces raw", async () => {
    t = await startTestServer();
    const fake = filesRunner({ binary: true });
    const runner = await t.runner({ handler: fake.handler, capabilities: [BINARY_FRAMES_CAPABILITY] });
    fake.attach(runner);
    expect(runner.received[0]).toMatchObject({
      type: "welcome",
      payload: { capabilities: [BINARY_FRAMES_CAPABILITY, UPLOAD_WINDOW_CAPABILITY] },
    });
    const container = await workspaceOn(t);
    const path = `/v1/workspaces/${container}/workspace/files/dir/data.bin`;
    expect((await http(t, "PUT", path, content)).status).toBe(201);
    const pieces = runner.commandsOf("workspace_write");
    expect(pieces.map((p) => [p.seq, p.data, p.data_frame, p.done])).toEqual([
      [0, "", true, false],
      [1, "", true, false],
      [2, "", true, true],
    ]);
    expect(runner.binary).toHaveLength(3);
    expect(fake.files.get("dir/data.bin")?.equals(content)).toBe(true);
    const got = await http(t, "GET", path);
    expect(got.status).toBe(200);
    expect(got.bytes.equals(content)).toBe(true);
  });

  it("a runner that did not announce them (an older one) gets base64 pieces and no binary frame", async () => {
    t = await startTestServer();
    const fake = filesRunner({ binary: false });
    const runner = await t.runner({ handler: fake.handler });
    fake.attach(runner);
    const container = await workspaceOn(t);
    const path = `/v1/workspaces/${container}/workspace/files/data.bin`;
    expect((await http(t, "PUT", path, content)).status).toBe(201);
    const pieces = runner.commandsOf("workspace_write");
    expect(pieces).toHaveLength(3);
    for (const p of pieces) {
      expect(p.data_frame).toBeUndefined();
      expect(p.data.length).toBeGreaterThan(0);
    }
    expect(runner.binary).toHaveLength(0);
    expect(fake.files.get("data.bin")?.equals(content)).toBe(true);
    const got = await http(t, "GET", path);
    expect(got.bytes.equals(content)).toBe(true);
  });

  it("drops a binary frame from a runner that did not announce them; the link stays up", async () => {
    t = await startTestServer();
    const fake = filesRunner({
      binary: false,
      noise: (r, relayId) =>
        r.ws.send(encodeBinaryFrame(BinaryKind.relayChunk, relayId, Buffer.from("INJECTED"))),
    });
    const runner = await t.runner({ handler: fake.handler });
    fake.attach(runner);
    const container = await workspaceOn(t);
    const path = `/v1/workspaces/${container}/workspace/files/a.bin`;
    await http(t, "PUT", path, Buffer.from("hello"));
    const got = await http(t, "GET", path);
    expect(got.bytes.toString()).toBe("hello");
    expect(runner.ws.readyState).toBe(runner.ws.OPEN);
  });

  it("drops malformed frames and frames naming a relay not sent to that runner; the download is whole and the link stays up", async () => {
    t = await startTestServer();
    const fake = filesRunner({
      binary: true,
      noise: (r, relayId) => {
        const wrongVersion = encodeBinaryFrame(BinaryKind.relayChunk, relayId, Buffer.from("V"));
        wrongVersion[0] = 9;
        r.ws.send(wrongVersion);
        r.ws.send(Buffer.from([1, 1])); // shorter than a header
        r.ws.send(encodeBinaryFrame(BinaryKind.commandData, relayId, Buffer.from("WRONG WAY")));
        r.ws.send(encodeBinaryFrame(BinaryKind.relayChunk, "another-relay", Buffer.from("OTHER"), true));
      },
    });
    const runner = await t.runner({ handler: fake.handler, capabilities: [BINARY_FRAMES_CAPABILITY] });
    fake.attach(runner);
    const container = await workspaceOn(t);
    const path = `/v1/workspaces/${container}/workspace/files/b.bin`;
    await http(t, "PUT", path, content);
    const got = await http(t, "GET", path);
    expect(got.status).toBe(200);
    expect(got.bytes.equals(content)).toBe(true);
    expect(runner.ws.readyState).toBe(runner.ws.OPEN);
  });
});
