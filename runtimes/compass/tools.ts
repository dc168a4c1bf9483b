/**
 * compass's tools, ours rather than the SDK's: `read`, `write`, `edit`, `bash`. Every path goes
 * through confine.ts (the workspace and /tmp only, symlink escapes refused); `bash` runs in the
 * workspace with a scrubbed environment (no provider key, no adapter token), a time limit and an
 * output limit, and is killed with its whole process group on timeout or cancel. A failure is
 * thrown: the SDK hands it to the model as a tool error (`isError`).
 */
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { type } from "@oh-my-pi/omptype";
import type { AgentTool, AgentToolResult } from "@oh-my-pi/pi-agent-core";
import { type McpSettings, sessionMcpTools } from "../kit/mcp-client.ts";
import { type Confinement, confinedPath } from "./confine.ts";

export const TOOL_NAMES = ["read", "write", "edit", "bash"] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

export type ToolLimits = {
  /** Largest file `read` returns whole; beyond it the first part and a note. @default 256 KiB */
  readBytes: number;
  /** Largest file `write`/`edit` write. @default 4 MiB */
  writeBytes: number;
  /** bash: default and ceiling of its `timeout` (seconds). @default 30 / 300 */
  bashTimeoutSeconds: number;
  bashMaxTimeoutSeconds: number;
  /** bash: stdout+stderr kept (the tail is dropped, and the result says so). @default 64 KiB */
  bashOutputBytes: number;
};

export const DEFAULT_LIMITS: ToolLimits = {
  readBytes: 256 * 1024,
  writeBytes: 4 * 1024 * 1024,
  bashTimeoutSeconds: 30,
  bashMaxTimeoutSeconds: 300,
  bashOutputBytes: 64 * 1024,
};

/** The environment bash sees: nothing of the agent's own (its credentials stay with it). */
export function bashEnv(workspace: string): Record<string, string> {
  return {
    PATH: "/usr/local/bin:/usr/bin:/bin",
    HOME: workspace,
    TMPDIR: "/tmp",
    LANG: "C.UTF-8",
    TERM: "dumb",
  };
}

const text = (t: string): AgentToolResult => ({ content: [{ type: "text", text: t }] });

export function compassTools(
  allowed: readonly ToolName[],
  confine: Confinement,
  limits: ToolLimits = DEFAULT_LIMITS,
): AgentTool[] {
  const all: Record<ToolName, AgentTool> = {
    read: {
      name: "read",
      label: "Read",
      description: "Read a text file of the workspace. Paths are relative to /workspace.",
      intent: "omit",
      parameters: type({ path: "string" }),
      execute: async (_id, params) => {
        const path = confinedPath((params as { path: string }).path, confine);
        const size = statSync(path).size;
        const body = readFileSync(path);
        if (size <= limits.readBytes) return text(body.toString("utf8"));
        return text(
          `${body.subarray(0, limits.readBytes).toString("utf8")}\n[compass: ${size - limits.readBytes} more bytes not shown]`,
        );
      },
    },
    write: {
      name: "write",
      label: "Write",
      description: "Write a file of the workspace (created with its directories, or replaced).",
      intent: "omit",
      parameters: type({ path: "string", content: "string" }),
      execute: async (_id, params) => {
        const { path: given, content } = params as { path: string; content: string };
        if (Buffer.byteLength(content) > limits.writeBytes)
          throw new Error(`content larger than ${limits.writeBytes} bytes`);
        const path = confinedPath(given, confine);
        mkdirSync(dirname(path), { recursive: true });
        // Re-checked after mkdir: a directory the call created cannot be a link, one that existed was checked.
        writeFileSync(confinedPath(given, confine), content);
        return text(`wrote ${Buffer.byteLength(content)} bytes to ${given}`);
      },
    },
    edit: {
      name: "edit",
      label: "Edit",
      description: "Replace one exact, unique occurrence of oldText with newText in a workspace file.",
      intent: "omit",
      parameters: type({ path: "string", oldText: "string", newText: "string" }),
      execute: async (_id, params) => {
        const {
          path: given,
          oldText,
          newText,
        } = params as { path: string; oldText: string; newText: string };
        if (!oldText) throw new Error("oldText must not be empty");
        const path = confinedPath(given, confine);
        const before = readFileSync(path, "utf8");
        const at = before.indexOf(oldText);
        if (at < 0) throw new Error(`oldText not found in ${given}`);
        if (before.indexOf(oldText, at + 1) >= 0)
          throw new Error(`oldText occurs more than once in ${given}`);
        const after = before.slice(0, at) + newText + before.slice(at + oldText.length);
        if (Buffer.byteLength(after) > limits.writeBytes)
          throw new Error(`result larger than ${limits.writeBytes} bytes`);
        writeFileSync(path, after);
        return text(`edited ${given}`);
      },
    },
    bash: {
      name: "bash",
      label: "Bash",
      description: `Run a bash command in /workspace. Output is cut at ${limits.bashOutputBytes} bytes; timeout in seconds (default ${limits.bashTimeoutSeconds}, at most ${limits.bashMaxTimeoutSeconds}).`,
      intent: "omit",
      parameters: type({ command: "string", "timeout?": "number" }),
      execute: (_id, params, signal) => {
        const { command, timeout } = params as { command: string; timeout?: number };
        return runBash(command, confine.cwd, limits, timeout, signal);
      },
    },
  };
  return allowed.map((name) => all[name]);
}

function runBash(
  command: string,
  cwd: string,
  limits: ToolLimits,
  timeoutSeconds: number | undefined,
  signal: AbortSignal | undefined,
): Promise<AgentToolResult> {
  const seconds = Math.min(
    Math.max(1, timeoutSeconds ?? limits.bashTimeoutSeconds),
    limits.bashMaxTimeoutSeconds,
  );
  return new Promise((resolve, reject) => {
    // Its own process group, so a timeout or cancel kills what it started too.
    const child = spawn("/bin/bash", ["-c", command], {
      cwd,
      env: bashEnv(cwd),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let output = "";
    let dropped = 0;
    const take = (chunk: Buffer) => {
      const room = limits.bashOutputBytes - Buffer.byteLength(output);
      if (room <= 0) {
        dropped += chunk.length;
        return;
      }
      const piece = chunk.subarray(0, room);
      output += piece.toString("utf8");
      dropped += chunk.length - piece.length;
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    let why: string | undefined;
    const kill = (reason: string) => {
      why ??= reason;
      try {
        if (child.pid) process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => kill(`timed out after ${seconds} s`), seconds * 1000);
    const onAbort = () => kill("cancelled");
    signal?.addEventListener("abort", onAbort, { once: true });
    child.on("error", (error) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      reject(error);
    });
    child.on("close", (code, sig) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      const notes = [
        dropped ? `[compass: ${dropped} bytes of output dropped]` : "",
        why ? `[compass: ${why}]` : "",
      ].filter(Boolean);
      const body = [output, ...notes].join(output && notes.length ? "\n" : "");
      if (why || code !== 0) reject(new Error(`${body}\n[exit ${code ?? sig}]`.trim()));
      else resolve(text(body));
    });
  });
}

/**
 * The tools of the Agent's MCP servers (issue 39), named `<server>_<tool>`, each a call through the
 * runner's gateway (runtimes/kit/mcp-client.ts): the gateway listed only the allowed ones, and a
 * call it refuses (or the server fails) is thrown, which the SDK hands the model as a tool error.
 */
export async function mcpTools(settings: McpSettings): Promise<AgentTool[]> {
  return (await sessionMcpTools(settings)).map(({ name, tool, client }) => ({
    name,
    label: `${tool.server}: ${tool.name}`,
    description: tool.description || `MCP tool ${tool.name} of server ${tool.server}.`,
    intent: "omit",
    parameters: tool.inputSchema as unknown as AgentTool["parameters"],
    execute: async (_id, params, signal) => {
      const result = await client.callTool(tool.name, (params ?? {}) as Record<string, unknown>, signal);
      if (result.isError) throw new Error(result.text);
      return text(result.text);
    },
  }));
}
