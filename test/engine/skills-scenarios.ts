/**
 * Skills in a session (issue 39), real parts only, the engine a parameter: `serve --no-runner`, a
 * `runner` process, real Pulumi stacks, the shipped runtimes' images and the loopback model server
 * (test/fixtures/model-server.ts, which keeps the messages of every request it is sent). A
 * SkillPack named by an Agent is at /skills/<pack>/<skill>.md in the session's workload,
 * read-only (a write fails), not executable, root's; its description reaches the model's prompt
 * through each harness's own mechanism (pi's --skill, the others' system prompt). A SkillPack
 * asking for privileged execution is refused naming the invariant, and a session bound to it
 * fails Invalid with nothing provisioned, until a pack of that name is written.
 */
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION, REFERENCE_AGENT_COMMAND } from "../../contracts/resources.ts";
import { SKILL_PACK_INVARIANT } from "../../contracts/skill-pack.ts";
import { SHIPPED_RUNTIMES } from "../../runtimes/catalogue.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { Engine, EngineProbe } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

export type SkillsScenarioOptions = {
  engine: Engine;
  probe: () => EngineProbe | Promise<EngineProbe>;
  /** The runtimes whose sessions get the skill. */
  runtimes: readonly string[];
  /** How long provisioning to Ready may take, in seconds. @default 300 */
  readySeconds?: number;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;

/** What runs in the workload: the skill file's facts as one JSON line (the runtime's own node or bun). */
const PROBE_SCRIPT = `
const fs = require("node:fs");
const { spawnSync } = require("node:child_process");
const p = process.argv[process.argv.length - 1];
const r = {};
const code = (f) => { try { f(); return "ok"; } catch (e) { return e.code || String(e); } };
try { r.content = fs.readFileSync(p, "utf8"); } catch (e) { r.content = "ERROR " + e.code; }
const st = fs.statSync(p);
r.mode = (st.mode & 0o777).toString(8);
r.uid = st.uid;
r.write = code(() => fs.writeFileSync(p, "changed"));
r.create = code(() => fs.writeFileSync(require("node:path").dirname(p) + "/new.md", "x"));
r.chmod = code(() => fs.chmodSync(p, 0o755));
r.access = code(() => fs.accessSync(p, fs.constants.X_OK));
const run = spawnSync(p);
r.spawn = run.error ? run.error.code : "exit " + run.status;
console.log(JSON.stringify(r));
`;

export function skillsScenarios(options: SkillsScenarioOptions): void {
  const READY_MS = (options.readySeconds ?? 300) * 1000;
  const tag = randomBytes(2).toString("hex");
  const sessionOf = (runtime: string) => `sk${tag}-${runtime}`;
  const pack = `tips${tag}`;
  const description = `Greets people the Ubuntu way ${tag}`;
  const content = "# Greeting\n\nSay hello and ask how their day was.";
  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;

  async function phase(name: string, want: string): Promise<Json> {
    return until(
      `${name} ${want}`,
      async () => {
        const s = (await system.call("GET", `${SESSIONS}/${name}`)).body;
        if (s.status?.phase === want) return s;
        if (s.status?.phase === "Failed" && want !== "Failed")
          throw new Error(`${name} failed: ${JSON.stringify(s.status)}`);
        return undefined;
      },
      READY_MS,
    );
  }

  const putSession = (name: string, agentRef: string) =>
    system.call("PUT", `${SESSIONS}/${name}`, {
      apiVersion: API_VERSION,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef },
    });

  const skillPack = (name: string, spec: Record<string, unknown> = {}) => ({
    apiVersion: API_VERSION,
    kind: "SkillPack",
    metadata: { name },
    spec: { skills: [{ name: "greeting", description, content }], ...spec },
  });

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-${randomBytes(8).toString("hex")}`;
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const put = await system.call("PUT", `${NS}/skillpacks/${pack}`, skillPack(pack));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    for (const runtime of options.runtimes) {
      const agent = modelAgent(sessionOf(runtime), model, { runtimeRef: runtime });
      const written = await system.call("PUT", `${NS}/agents/${sessionOf(runtime)}`, {
        ...agent,
        spec: { ...agent.spec, skills: [{ skillPackRef: pack }] },
      });
      expect(written.status, JSON.stringify(written.body)).toBe(201);
    }
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    for (const runtime of options.runtimes)
      await system?.call("DELETE", `${SESSIONS}/${sessionOf(runtime)}`).catch(() => undefined);
    await system?.call("DELETE", `${SESSIONS}/sk${tag}-priv`).catch(() => undefined);
    await system?.stop();
    await model?.close();
    probe?.close();
  });

  describe(`a session's skills (real engine: ${options.engine})`, () => {
    for (const runtime of options.runtimes)
      it(`${runtime}: the skill is at /skills/<pack>/<skill>.md read-only and not executable, and reaches the model's prompt`, async () => {
        const name = sessionOf(runtime);
        const put = await putSession(name, name);
        expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
        const ready = await phase(name, "Ready");
        const container: string = ready.status.containerName;

        const row = SHIPPED_RUNTIMES.find((r) => r.name === runtime);
        const command = row && "agentCommand" in row ? row.agentCommand : REFERENCE_AGENT_COMMAND;
        const interpreter = command[0] ?? "/bin/node";
        const out = await probe.exec(container, [
          interpreter,
          "-e",
          PROBE_SCRIPT,
          `/skills/${pack}/greeting.md`,
        ]);
        const facts = JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
        expect(facts.content).toContain(content);
        expect(facts.content).toContain(`description: ${JSON.stringify(description)}`);
        expect(facts.mode).toBe("444");
        expect(facts.uid).toBe(0);
        // Read-only: neither the file nor its directory takes a write, and its mode stays.
        expect(["EROFS", "EACCES", "EPERM"]).toContain(facts.write);
        expect(["EROFS", "EACCES", "EPERM"]).toContain(facts.create);
        expect(["EROFS", "EACCES", "EPERM"]).toContain(facts.chmod);
        // Not executable.
        expect(facts.access).toBe("EACCES");
        expect(facts.spawn).toBe("EACCES");

        const before = model.received.length;
        const reply = await system.call("POST", `${SESSIONS}/${name}/requests`, { input: "say hello" });
        expect(reply.status, JSON.stringify(reply.body)).toBe(200);
        const prompts = model.received.slice(before).map((messages) => JSON.stringify(messages));
        expect(prompts.length).toBeGreaterThan(0);
        // The harness told its model of the skill: its description, and where to read it.
        expect(prompts.some((p) => p.includes(description) && p.includes(`${pack}/greeting.md`))).toBe(true);
        await system.call("DELETE", `${SESSIONS}/${name}`);
      });

    it("a privileged SkillPack is refused naming the invariant; a session bound to it fails Invalid and nothing is provisioned, until a pack of that name is written", async () => {
      const privileged = `root${tag}`;
      const refused = await system.call(
        "PUT",
        `${NS}/skillpacks/${privileged}`,
        skillPack(privileged, {
          sidecar: {
            image: "bitnami/kubectl:latest",
            hostAccess: { enabled: true, hostNetwork: true, hostPID: true, privileged: true },
            clusterRBAC: [{ apiGroups: [""], resources: ["nodes"], verbs: ["list"] }],
          },
        }),
      );
      expect(refused.status).toBe(400);
      expect(refused.body.code).toBe("INVALID_ARGUMENT");
      expect(refused.body.message).toContain(SKILL_PACK_INVARIANT);
      expect(refused.body.message).toContain("spec.sidecar.hostAccess.privileged");
      expect((await system.call("GET", `${NS}/skillpacks/${privileged}`)).status).toBe(404);

      const name = `sk${tag}-priv`;
      const agent = modelAgent(name, model);
      expect(
        (
          await system.call("PUT", `${NS}/agents/${name}`, {
            ...agent,
            spec: { ...agent.spec, skills: [{ skillPackRef: privileged }] },
          })
        ).status,
      ).toBe(201);
      expect((await putSession(name, name)).status).toBe(201);
      const failed = await phase(name, "Failed");
      expect(failed.status.conditions[0]).toMatchObject({
        status: "False",
        reason: "Invalid",
        message: `SkillPack default/${privileged} of Agent default/${name} not found`,
      });
      expect(failed.status.containerName).toBeUndefined();
      expect(await probe.workloadsNamed(name)).toEqual([]);

      // The pack written as Markdown only: the session is retried and comes up with it.
      expect((await system.call("PUT", `${NS}/skillpacks/${privileged}`, skillPack(privileged))).status).toBe(
        201,
      );
      const ready = await phase(name, "Ready");
      const listing = await probe.readFile(ready.status.containerName, `/skills/${privileged}/greeting.md`);
      expect(listing).toContain(content);
      await system.call("DELETE", `${SESSIONS}/${name}`);
    });
  });
}
