/**
 * The Automation API library: one stack of the root project per session (name from namespace and
 * session name), driven by intent: create only on create, select for everything else; up,
 * scaleDown, resume, destroy (then stack removal), outputs, refresh, preview. The policy pack is
 * attached to every up and preview. One operation per stack at a time in this process, any
 * number of stacks concurrently; a lock left by a crashed process is recovered and logged.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import {
  type EngineEvent,
  LocalWorkspace,
  PulumiCommand,
  type OutputMap,
  type Stack,
  type UpResult,
  StackNotFoundError,
} from "@pulumi/pulumi/automation/index.js";
import { parseOrThrow } from "../contracts/errors.ts";
import { jsonLogger, type Logger } from "../contracts/log.ts";
import { CONTROL_PLANE_PORTS } from "../contracts/egress.ts";
import { snapshotStackName } from "../contracts/session-snapshot.ts";
import {
  ConfigKeys,
  RECORD_ONLY_ENV,
  SessionOutputs,
  SessionSpec,
  type SessionSpecInput,
  SnapshotStackSpec,
  sessionStackName,
} from "../contracts/session-spec.ts";
import {
  isLockedError,
  PolicyViolationError,
  redactCommandText,
  StackError,
  toStackError,
} from "./errors.ts";
import { answerFromFileBackend, stackExists, withoutSummary } from "./file-backend.ts";
import { KeyedMutex } from "../contracts/keyed-mutex.ts";
import { interruptedRecordings, markRecording } from "./recording.ts";
import {
  PLUGIN_BIN_DIR,
  OUR_POLICY_PACK,
  PROJECT_NAME,
  type ResolvedStackOptions,
  resolveStackOptions,
  type StackManagerOptionsInput,
} from "./options.ts";
import { ourPackConfig, policyPackConfigsFor } from "./policy-pack-config.ts";
import {
  adoptSettings,
  type CliInvocation,
  getConfigValue,
  hasConfig,
  readPlainConfig,
  setSecretConfig,
  settingsPath,
  writePlainConfig,
} from "./stack-settings.ts";
import { allStale, lockHolders } from "./stale-lock.ts";

export type SessionSecrets = {
  /** Credential env name → value: exactly what the Agent allows. Stored as Pulumi secrets. */
  credentials: Record<string, string>;
  /** The per-session adapter token the runner holds. Stored as a Pulumi secret. */
  adapterToken: string;
};

export type StackOperation = "up" | "scaleDown" | "resume" | "destroy" | "refresh" | "preview";

/** A progress event, taken from the engine's own event stream (it carries a sequence). */
export type StackProgress = {
  stack: string;
  operation: StackOperation;
  sequence: number;
  kind: "resource" | "policy" | "diagnostic" | "summary";
  message: string;
  urn?: string;
  resourceType?: string;
  step?: string;
};

export type OperationOptions = {
  onProgress?: (event: StackProgress) => void;
  signal?: AbortSignal;
  /**
   * The `up` records what the runner's fast path already made (runner/engine/fast-path.ts): the
   * providers only adopt what the engine holds and never make a workload (the Docker provider
   * fails the create instead, infra/docker/provider/provider.ts), so a recording overtaken by a
   * newer operation cannot undo it. @default false
   */
  recordOnly?: boolean;
  /** Refresh the state from the engine before the `up` (in the same run). @default false */
  refresh?: boolean;
};

export type { Logger };

const defaultLogger: Logger = jsonLogger("stacks");

export class StackManager {
  readonly options: ResolvedStackOptions;
  readonly #mutex = new KeyedMutex();
  readonly #command: PulumiCommand;
  readonly #log: Logger;

  private constructor(options: ResolvedStackOptions, command: PulumiCommand, log: Logger) {
    this.options = options;
    this.#command = command;
    this.#log = log;
  }

  static async create(
    input: StackManagerOptionsInput,
    deps: { pulumiCommand?: PulumiCommand; log?: Logger } = {},
  ): Promise<StackManager> {
    const options = resolveStackOptions(input);
    // The CLI the test bed built lives in $PULUMI_HOME/bin; otherwise whatever `pulumi` is on PATH.
    const command =
      deps.pulumiCommand ??
      (await PulumiCommand.get({
        ...(options.pulumiHome ? { root: options.pulumiHome } : {}),
        skipVersionCheck: true,
      }));
    return new StackManager(options, command, deps.log ?? defaultLogger);
  }

  stackName(namespace: string, name: string): string {
    return sessionStackName(namespace, name);
  }

  #envVars(): Record<string, string> {
    const o = this.options;
    const path = [
      PLUGIN_BIN_DIR,
      dirname(process.execPath),
      ...(o.pulumiHome ? [`${o.pulumiHome}/bin`] : []),
      process.env.PATH ?? "",
    ].join(":");
    return {
      ...o.env,
      PULUMI_BACKEND_URL: o.backendUrl,
      PULUMI_CONFIG_PASSPHRASE: o.passphrase,
      PULUMI_SKIP_UPDATE_CHECK: "1",
      PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK: "1",
      PATH: path,
      ...(o.pulumiHome ? { PULUMI_HOME: o.pulumiHome } : {}),
    };
  }

  async #workspace(env: Record<string, string> = {}): Promise<LocalWorkspace> {
    const ws = await LocalWorkspace.create({
      workDir: this.options.projectDir,
      envVars: { ...this.#envVars(), ...env },
      secretsProvider: this.options.secretsProvider,
      pulumiCommand: this.#command,
      ...(this.options.pulumiHome ? { pulumiHome: this.options.pulumiHome } : {}),
    });
    const backendDir = this.options.backendDir;
    return backendDir ? answerFromFileBackend(ws, backendDir, PROJECT_NAME) : ws;
  }

  async #select(stackName: string, opts: OperationOptions = {}): Promise<Stack> {
    const ws = await this.#workspace(opts.recordOnly ? { [RECORD_ONLY_ENV]: "1" } : {});
    const { Stack } = await import("@pulumi/pulumi/automation/index.js");
    return withoutSummary(await Stack.select(stackName, ws));
  }

  /**
   * True when the session's stack exists in the backend. A file backend answers from the stack's
   * own checkpoint file (file-backend.ts): no CLI run, and another stack's damaged file (an `up`
   * killed mid-write) cannot make this one's answer fail, as `pulumi stack ls`, which reads them
   * all, can.
   */
  async exists(namespace: string, name: string): Promise<boolean> {
    return this.#exists(this.stackName(namespace, name));
  }

  async #exists(stackName: string): Promise<boolean> {
    const backendDir = this.options.backendDir;
    if (backendDir) return stackExists(backendDir, PROJECT_NAME, stackName);
    const ws = await this.#workspace();
    const stacks = await ws.listStacks();
    return stacks.some((s) => s.name === stackName || s.name.endsWith(`/${stackName}`));
  }

  /** Stack names of every session in the backend. */
  async list(): Promise<string[]> {
    const ws = await this.#workspace();
    return (await ws.listStacks()).map((s) => s.name.split("/").pop() ?? s.name);
  }

  /**
   * Brings a session's stack to its spec: creates the stack when it does not exist (and only
   * then), else selects it; writes spec and secrets to stack config; runs `up` with the policy
   * pack. Validates the spec with zod before any Pulumi call.
   */
  async up(
    specInput: SessionSpecInput,
    secrets: SessionSecrets,
    opts: OperationOptions = {},
  ): Promise<SessionOutputs> {
    const spec = parseOrThrow(SessionSpec, specInput, "session spec");
    const stackName = this.stackName(spec.namespace, spec.name);
    return this.#mutex.run(stackName, async () => {
      if (!(await this.exists(spec.namespace, spec.name))) {
        // `stack init` writes the new stack's settings (its encryption salt) into its working
        // directory: the settings directory under the data dir, never the repo root.
        const settings = await this.#settingsWorkspace();
        await settings.createStack(stackName).catch((e: unknown) => {
          throw toStackError(stackName, "create", e);
        });
      }
      const stack = await this.#select(stackName, opts);
      this.#adopt(stackName);
      await this.#writeConfig(stack, spec, secrets);
      return this.#runUp(stack, stackName, spec, "up", opts, secretValues(secrets));
    });
  }

  /**
   * Declares a snapshot's storage (contracts/session-snapshot.ts) in its own stack
   * (`snapshotStackName`): created when missing, config written, `up` with the policy pack. The
   * runner makes the storage on the engine first and records it here behind (`recordOnly`): the
   * provider adopts the volume or claim it finds. Resolves with the storage's name.
   */
  async upSnapshot(specInput: SnapshotStackSpec, opts: OperationOptions = {}): Promise<string> {
    const spec = parseOrThrow(SnapshotStackSpec, specInput, "snapshot stack spec");
    const stackName = snapshotStackName(spec.target.namespace, spec.target.name);
    return this.#mutex.run(stackName, async () => {
      if (!(await this.#exists(stackName))) {
        const settings = await this.#settingsWorkspace();
        await settings.createStack(stackName).catch((e: unknown) => {
          throw toStackError(stackName, "create", e);
        });
      }
      const stack = await this.#select(stackName, opts);
      const configFile = this.#adopt(stackName);
      writePlainConfig(configFile, { [ConfigKeys.snapshot]: JSON.stringify(spec) });
      const violations: Violation[] = [];
      let result: UpResult;
      try {
        result = await this.#withLockRecovery(stackName, "up", () =>
          stack.up({
            configFile,
            showSecrets: false,
            policyPacks: this.options.policyPacks,
            // No egress in a snapshot's stack: the pack's ports are the control plane's defaults.
            ...this.#policyPackConfigs(stackName, { forbiddenEgressPorts: [...CONTROL_PLANE_PORTS] }),
            onEvent: this.#progress(stackName, "up", opts, violations),
            ...(opts.signal ? { signal: opts.signal } : {}),
          }),
        );
      } catch (error) {
        if (violations.length) throw new PolicyViolationError(stackName, violations);
        this.#log("error", "stack operation failed", {
          stack: stackName,
          op: "up",
          engine: String((error as Error).message).slice(-2000),
        });
        throw toStackError(stackName, "up", error);
      }
      const storage = result.outputs.storage?.value;
      if (typeof storage !== "string")
        throw new StackError("INTERNAL", `stack ${stackName} did not output its storage`);
      return storage;
    });
  }

  /** True when the snapshot's stack exists in the backend. */
  snapshotExists(namespace: string, name: string): Promise<boolean> {
    return this.#exists(snapshotStackName(namespace, name));
  }

  /**
   * Destroys a snapshot's storage and removes its stack; false when there is no such stack (the
   * caller then removes a storage made but not recorded yet).
   */
  async destroySnapshot(namespace: string, name: string, opts: OperationOptions = {}): Promise<boolean> {
    const stackName = snapshotStackName(namespace, name);
    if (!(await this.#exists(stackName))) return false;
    await this.#destroyStack(stackName, opts);
    return true;
  }

  /**
   * Marks the session's stack as having a recording pending (stacks/recording.ts) until the
   * returned function is called: set before the runner's fast path changes the engine, cleared
   * when the `up` recording that change has finished.
   */
  markRecording(namespace: string, name: string): () => void {
    return markRecording(this.options.dataDir, this.stackName(namespace, name));
  }

  /**
   * Sessions whose recording a process that is gone left pending (stacks/recording.ts): a runner
   * restarted mid-recording records their engine's state again (runner/runner.ts).
   */
  interruptedRecordings(): { namespace: string; name: string }[] {
    return interruptedRecordings(this.options.dataDir).flatMap((stackName) => {
      // sessionStackName: `<namespace>--<name>`, neither part holding `--`.
      const [namespace, name, ...rest] = stackName.split("--");
      return namespace && name && rest.length === 0 ? [{ namespace, name }] : [];
    });
  }

  /**
   * Judges resources a caller is about to make outside an `up` (the runner's fast create) with
   * the policy pack in process (policies/judge.ts), under the config an `up` of this spec would
   * give it. `undefined` when that cannot stand in for the `up`'s own check: another pack is
   * attached (only ours can be run in process) or ours is not.
   */
  async judge(
    specInput: SessionSpecInput,
    resources: { type: string; name: string; props: object }[],
  ): Promise<{ policy: string; message: string }[] | undefined> {
    const spec = parseOrThrow(SessionSpec, specInput, "session spec");
    const packs = this.options.policyPacks;
    if (packs.length !== 1 || resolve(packs[0] ?? "") !== resolve(OUR_POLICY_PACK)) return undefined;
    const { judgeAll } = await import("../policies/judge.ts");
    return judgeAll(resources, ourPackConfig(this.options.policyPackConfigs[0], spec));
  }

  /** Stop: `up` with replicas 0. The volume (PVC or Docker volume) stays. */
  scaleDown(namespace: string, name: string, opts: OperationOptions = {}): Promise<SessionOutputs> {
    return this.#scale(namespace, name, 0, "scaleDown", opts);
  }

  /** Resume: `up` with replicas 1 against the kept volume. */
  resume(namespace: string, name: string, opts: OperationOptions = {}): Promise<SessionOutputs> {
    return this.#scale(namespace, name, 1, "resume", opts);
  }

  #scale(
    namespace: string,
    name: string,
    replicas: 0 | 1,
    op: StackOperation,
    opts: OperationOptions,
  ): Promise<SessionOutputs> {
    const stackName = this.stackName(namespace, name);
    return this.#mutex.run(stackName, async () => {
      const stack = await this.#selectExisting(stackName, opts);
      // The spec is plain config in the settings file: read and written here, no CLI call.
      const file = this.#adopt(stackName);
      const current = readPlainConfig(file, ConfigKeys.spec);
      if (current === undefined)
        throw new StackError("FAILED_PRECONDITION", `stack ${stackName} has no session spec in its settings`);
      const spec = parseOrThrow(SessionSpec, JSON.parse(current), "stored session spec");
      const scaled = { ...spec, replicas };
      await this.#ensureStateHashKey(stackName, file, []);
      writePlainConfig(file, { [ConfigKeys.spec]: JSON.stringify(scaled) });
      return this.#runUp(stack, stackName, scaled, op, opts, []);
    });
  }

  /** Destroy every resource of the session (volume included), then remove the stack. */
  destroy(namespace: string, name: string, opts: OperationOptions = {}): Promise<void> {
    return this.#destroyStack(this.stackName(namespace, name), opts);
  }

  #destroyStack(stackName: string, opts: OperationOptions): Promise<void> {
    return this.#mutex.run(stackName, async () => {
      const stack = await this.#selectExisting(stackName);
      const configFile = this.#adopt(stackName);
      await this.#withLockRecovery(stackName, "destroy", () =>
        stack.destroy({
          configFile,
          // With secrets shown, the summary's `stack history` writes a new salt file beside the project.
          showSecrets: false,
          onEvent: this.#progress(stackName, "destroy", opts, []),
          ...(opts.signal ? { signal: opts.signal } : {}),
        }),
      );
      await stack.workspace.removeStack(stackName).catch((e: unknown) => {
        throw toStackError(stackName, "stack rm", e);
      });
      rmSync(configFile, { force: true });
      this.#log("info", "stack destroyed and removed", { stack: stackName });
    });
  }

  /** The stack's outputs, validated. */
  async outputs(namespace: string, name: string): Promise<SessionOutputs> {
    const stackName = this.stackName(namespace, name);
    const stack = await this.#selectExisting(stackName);
    return this.#outputsOf(stack, stackName);
  }

  /**
   * The session's adapter token, read back from the stack's config (a secret, decrypted with the
   * stack's secrets provider): a runner restarted since the `up` that wrote it takes it from here.
   * NOT_FOUND when there is no such stack.
   */
  async adapterToken(namespace: string, name: string): Promise<string> {
    const stackName = this.stackName(namespace, name);
    await this.#selectExisting(stackName);
    const file = this.#adopt(stackName);
    try {
      return await getConfigValue(this.#cli(), stackName, file, ConfigKeys.adapterToken);
    } catch (error) {
      // A stack made but never `up`-ed to the end (its first recording died with its process).
      if (/configuration key '[^']+' not found/.test(String((error as Error)?.message)))
        throw new StackError("NOT_FOUND", `stack ${stackName} records no adapter token`);
      this.#log("error", "stack config failed", {
        stack: stackName,
        engine: redactCommandText(String((error as Error).message)).slice(-2000),
      });
      throw toStackError(stackName, "config", error);
    }
  }

  /** Reconcile state with the engine (e.g. a container removed outside Pulumi). */
  refresh(namespace: string, name: string, opts: OperationOptions = {}): Promise<void> {
    const stackName = this.stackName(namespace, name);
    return this.#mutex.run(stackName, async () => {
      const stack = await this.#selectExisting(stackName);
      const configFile = this.#adopt(stackName);
      await this.#withLockRecovery(stackName, "refresh", () =>
        stack.refresh({
          configFile,
          showSecrets: false,
          onEvent: this.#progress(stackName, "refresh", opts, []),
          ...(opts.signal ? { signal: opts.signal } : {}),
        }),
      );
    });
  }

  /** Preview a spec with the policy pack; never changes anything. Throws PolicyViolationError. */
  async preview(
    specInput: SessionSpecInput,
    secrets: SessionSecrets,
    opts: OperationOptions = {},
  ): Promise<{ changes: Record<string, number> }> {
    const spec = parseOrThrow(SessionSpec, specInput, "session spec");
    const stackName = this.stackName(spec.namespace, spec.name);
    return this.#mutex.run(stackName, async () => {
      const stack = await this.#selectExisting(stackName);
      const configFile = this.#adopt(stackName);
      await this.#writeConfig(stack, spec, secrets);
      const violations: Violation[] = [];
      try {
        const result = await stack.preview({
          configFile,
          policyPacks: this.options.policyPacks,
          ...this.#policyPackConfigs(stackName, spec),
          onEvent: this.#progress(stackName, "preview", opts, violations),
        });
        if (violations.length) throw new PolicyViolationError(stackName, violations);
        return { changes: result.changeSummary as Record<string, number> };
      } catch (error) {
        if (violations.length) throw new PolicyViolationError(stackName, violations);
        this.#log("error", "stack operation failed", {
          stack: stackName,
          op: "preview",
          engine: redactCommandText(String((error as Error).message), secretValues(secrets)).slice(-2000),
        });
        throw toStackError(stackName, "preview", error);
      }
    });
  }

  /** The pack's config for this stack: the operator's files plus the spec's forbidden egress ports. */
  #policyPackConfigs(
    stackName: string,
    spec: Pick<SessionSpec, "forbiddenEgressPorts" | "ports" | "session">,
  ): { policyPackConfigs?: string[] } {
    const configs = policyPackConfigsFor({
      packs: this.options.policyPacks,
      configs: this.options.policyPackConfigs,
      ourPack: OUR_POLICY_PACK,
      dir: join(this.options.dataDir, "policy-config"),
      stackName,
      spec,
    });
    return configs.length ? { policyPackConfigs: configs } : {};
  }

  /** A workspace of the project in the settings directory: only for `stack init`. */
  async #settingsWorkspace(): Promise<LocalWorkspace> {
    const dir = dirname(settingsPath(this.options.dataDir, "x"));
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    // Only the project's name matters here (the backend keys stacks by it); no program runs here.
    writeFileSync(join(dir, "Pulumi.yaml"), `name: ${PROJECT_NAME}\nruntime: nodejs\n`, { mode: 0o600 });
    return LocalWorkspace.create({
      workDir: dir,
      envVars: this.#envVars(),
      secretsProvider: this.options.secretsProvider,
      pulumiCommand: this.#command,
      ...(this.options.pulumiHome ? { pulumiHome: this.options.pulumiHome } : {}),
    });
  }

  async #selectExisting(stackName: string, opts: OperationOptions = {}): Promise<Stack> {
    try {
      return await this.#select(stackName, opts);
    } catch (error) {
      if (error instanceof StackNotFoundError || /no stack named|not found/i.test(String(error))) {
        throw new StackError("NOT_FOUND", `stack ${stackName} not found`);
      }
      throw toStackError(stackName, "select", error);
    }
  }

  /** How our own CLI calls (secrets on stdin, values on stdout) are run. */
  #cli(): CliInvocation {
    return { command: this.#command.command, cwd: this.options.projectDir, env: this.#envVars() };
  }

  /** The stack's settings file under the data dir (0600), taken over from the project dir once. */
  #adopt(stackName: string): string {
    const file = settingsPath(this.options.dataDir, stackName);
    adoptSettings(this.options.projectDir, stackName, file);
    return file;
  }

  /**
   * The spec goes into the settings file as plain config; credentials and the adapter token reach
   * the CLI on stdin and are stored encrypted by the stack's secrets provider (stack-settings.ts):
   * no secret is ever in a process's arguments.
   */
  async #writeConfig(stack: Stack, spec: SessionSpec, secrets: SessionSecrets): Promise<void> {
    const file = this.#adopt(stack.name);
    writePlainConfig(file, { [ConfigKeys.spec]: JSON.stringify(spec) });
    const cli = this.#cli();
    const redact = secretValues(secrets);
    await this.#ensureStateHashKey(stack.name, file, redact);
    for (const [key, value] of [
      [ConfigKeys.credentials, JSON.stringify(secrets.credentials)],
      [ConfigKeys.adapterToken, secrets.adapterToken],
    ] as const) {
      try {
        await setSecretConfig(cli, stack.name, file, key, value);
      } catch (error) {
        // The CLI's stderr may name config values: log it redacted, never hand it to a caller.
        this.#log("error", "stack config failed", {
          stack: stack.name,
          engine: redactCommandText(String((error as Error).message), redact).slice(-2000),
        });
        throw toStackError(stack.name, "config", error);
      }
    }
  }

  /**
   * The stack's own random key of the credential hash its Docker state keeps
   * (infra/docker/provider/provider.ts): made once, on stdin like every secret, and kept — a new
   * key would make unchanged credentials look changed and roll the workload.
   */
  async #ensureStateHashKey(stackName: string, file: string, redact: readonly string[]): Promise<void> {
    if (hasConfig(file, ConfigKeys.stateHashKey)) return;
    try {
      await setSecretConfig(
        this.#cli(),
        stackName,
        file,
        ConfigKeys.stateHashKey,
        randomBytes(32).toString("base64url"),
      );
    } catch (error) {
      this.#log("error", "stack config failed", {
        stack: stackName,
        engine: redactCommandText(String((error as Error).message), redact).slice(-2000),
      });
      throw toStackError(stackName, "config", error);
    }
  }

  async #runUp(
    stack: Stack,
    stackName: string,
    spec: SessionSpec,
    op: StackOperation,
    opts: OperationOptions,
    secrets: readonly string[],
  ): Promise<SessionOutputs> {
    const configFile = settingsPath(this.options.dataDir, stackName);
    const violations: Violation[] = [];
    let result: UpResult;
    try {
      result = await this.#withLockRecovery(stackName, op, () =>
        stack.up({
          configFile,
          // With secrets shown, the summary's `stack history` writes a new salt file beside the project.
          showSecrets: false,
          policyPacks: this.options.policyPacks,
          ...this.#policyPackConfigs(stackName, spec),
          onEvent: this.#progress(stackName, op, opts, violations),
          ...(opts.signal ? { signal: opts.signal } : {}),
          ...(opts.refresh ? { refresh: true } : {}),
        }),
      );
    } catch (error) {
      if (violations.length) throw new PolicyViolationError(stackName, violations);
      this.#log("error", "stack operation failed", {
        stack: stackName,
        op,
        engine: redactCommandText(String((error as Error).message), secrets).slice(-2000),
      });
      throw toStackError(stackName, op, error);
    }
    // `up` already read the outputs: reading them again would cost two more CLI calls.
    return this.#parseOutputs(result.outputs, stackName);
  }

  async #outputsOf(stack: Stack, stackName: string): Promise<SessionOutputs> {
    return this.#parseOutputs(await stack.outputs(), stackName);
  }

  #parseOutputs(outs: OutputMap, stackName: string): SessionOutputs {
    return parseOrThrow(
      SessionOutputs,
      Object.fromEntries(Object.entries(outs).map(([k, v]) => [k, v.value])),
      `outputs of stack ${stackName}`,
    );
  }

  /** Runs an operation; if a stale lock of a crashed process blocks it, cancels that lock (logged) and retries once. */
  async #withLockRecovery<T>(stackName: string, op: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (!isLockedError(error) || !this.options.backendDir) throw error;
      const holders = await lockHolders(this.options.backendDir, PROJECT_NAME, stackName);
      if (!allStale(holders)) throw error;
      this.#log("warn", "recovering a stack lock left by a crashed process", {
        stack: stackName,
        op,
        holders: holders.map((h) => ({ pid: h.pid, hostname: h.hostname })),
      });
      const stack = await this.#select(stackName);
      await stack.cancel();
      return fn();
    }
  }

  #progress(
    stackName: string,
    op: StackOperation,
    opts: OperationOptions,
    violations: Violation[],
  ): (e: EngineEvent) => void {
    return (event) => {
      const base = { stack: stackName, operation: op, sequence: event.sequence };
      let progress: StackProgress | undefined;
      if (event.policyEvent) {
        const p = event.policyEvent;
        if (p.enforcementLevel === "mandatory") violations.push({ policy: p.policyName, message: p.message });
        progress = {
          ...base,
          kind: "policy",
          message: `${p.policyName}: ${p.message}`,
          ...(p.resourceUrn ? { urn: p.resourceUrn } : {}),
        };
      } else if (event.resOutputsEvent) {
        const m = event.resOutputsEvent.metadata;
        progress = {
          ...base,
          kind: "resource",
          message: `${m.op} ${m.type} done`,
          urn: m.urn,
          resourceType: m.type,
          step: m.op,
        };
      } else if (event.resourcePreEvent) {
        const m = event.resourcePreEvent.metadata;
        progress = {
          ...base,
          kind: "resource",
          message: `${m.op} ${m.type}`,
          urn: m.urn,
          resourceType: m.type,
          step: m.op,
        };
      } else if (event.diagnosticEvent) {
        progress = {
          ...base,
          kind: "diagnostic",
          message: event.diagnosticEvent.message.trim().slice(0, 500),
        };
      } else if (event.summaryEvent) {
        progress = { ...base, kind: "summary", message: JSON.stringify(event.summaryEvent.resourceChanges) };
      }
      if (progress && opts.onProgress) opts.onProgress(progress);
    };
  }
}

type Violation = { policy: string; message: string };

/** The values a failed command's text must never show. */
function secretValues(secrets: SessionSecrets): string[] {
  return [...Object.values(secrets.credentials), secrets.adapterToken, JSON.stringify(secrets.credentials)];
}
