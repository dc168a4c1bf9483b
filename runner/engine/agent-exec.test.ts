import { execFileSync, spawn, spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  AGENT_PID_MARKER,
  AgentPidReader,
  agentExecCommand,
  agentSignalCommand,
  signalUntilEnded,
} from "./agent-exec.ts";

describe("the exec'd agent's PID", () => {
  it("is reported by the wrapper before it becomes the agent, with the agent's arguments kept", () => {
    const cmd = agentExecCommand(["node", "agent.js", "--flag"]);
    expect(cmd.slice(0, 2)).toEqual(["/bin/sh", "-c"]);
    expect(cmd.slice(3)).toEqual(["agent", "node", "agent.js", "--flag"]);
  });

  it("becomes the agent without the adapter's token in the environment it was executed with (issue 35)", () => {
    const [sh, ...args] = agentExecCommand([
      "/bin/sh",
      "-c",
      'echo "pid=$$"; cat /proc/$$/environ | tr "\\0" "\\n"',
    ]);
    const out = spawnSync(sh as string, args, {
      env: { PATH: process.env.PATH, ADAPTER_TOKEN: "adapter-secret-0123456789", MODEL_API_KEY: "asgw_x" },
    });
    const stdout = out.stdout.toString();
    // The same process the wrapper reported: `exec` kept its PID.
    expect(out.stderr.toString()).toBe(`${AGENT_PID_MARKER}${stdout.match(/pid=(\d+)/)?.[1]}\n`);
    expect(stdout).toContain("MODEL_API_KEY=asgw_x");
    expect(stdout).not.toContain("adapter-secret");
  });

  it("becomes the agent as the OOM killer's first choice (oom_score_adj 1000), with nothing more on stderr", () => {
    const [sh, ...args] = agentExecCommand(["/bin/sh", "-c", "cat /proc/self/oom_score_adj"]);
    const out = spawnSync(sh as string, args, { env: { PATH: process.env.PATH } });
    expect(out.stdout.toString()).toBe("1000\n");
    expect(out.stderr.toString()).toMatch(new RegExp(`^${AGENT_PID_MARKER}\\d+\n$`));
  });

  it("is read only once its line is complete, even when stderr splits it", async () => {
    const reader = new AgentPidReader();
    reader.feed(`${AGENT_PID_MARKER}12`);
    expect(reader.value).toBeUndefined();
    reader.feed("34\nthe agent's own log\n");
    expect(reader.value).toBe("1234");
    await expect(reader.pid).resolves.toBe("1234");
  });

  it("is undefined once the agent ended without the wrapper's line", async () => {
    const reader = new AgentPidReader();
    reader.feed("some other output\n");
    reader.end();
    await expect(reader.pid).resolves.toBeUndefined();
    expect(reader.value).toBeUndefined();
  });
});

describe("signalling the agent", () => {
  it("needs no kill binary in the image: the shell's builtin sends it", async () => {
    const agent = spawn("/bin/sh", ["-c", "exec sleep 30"], { stdio: "ignore" });
    const ended = new Promise<NodeJS.Signals | null>((r) => agent.once("exit", (_code, signal) => r(signal)));
    const [file, ...args] = agentSignalCommand("TERM", String(agent.pid));
    // An empty PATH: no kill executable can be found, only the builtin runs.
    execFileSync(file as string, args, { env: { PATH: "" } });
    expect(await ended).toBe("SIGTERM");
  });
});

describe("stopping a signalled agent", () => {
  it("stops at SIGTERM when the agent ends within the grace period", async () => {
    const sent: string[] = [];
    const ended = await signalUntilEnded(
      async (name) => {
        sent.push(name);
      },
      async () => true,
    );
    expect(ended).toBe(true);
    expect(sent).toEqual(["TERM"]);
  });

  it("escalates to SIGKILL, and says so when the agent outlives both", async () => {
    const sent: string[] = [];
    const waits: number[] = [];
    const ended = await signalUntilEnded(
      async (name) => {
        sent.push(name);
      },
      async (ms) => {
        waits.push(ms);
        return false;
      },
    );
    expect(ended).toBe(false);
    expect(sent).toEqual(["TERM", "KILL"]);
    expect(waits).toHaveLength(2);
  });
});
