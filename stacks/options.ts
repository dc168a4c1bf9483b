import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** The project's CrossGuard pack (policies/). */
export const OUR_POLICY_PACK = join(repoRoot, "policies");

/** Options of a StackManager; every field has a default that works embedded. */
export const StackManagerOptions = z.object({
  /** Directory with server data; the default backend and passphrase live under it. */
  dataDir: z.string().min(1),
  /** Pulumi project directory (the root project: the session program). @default the repo root */
  projectDir: z.string().default(repoRoot),
  /** Any Pulumi backend URL. @default file://<dataDir>/pulumi-state */
  backendUrl: z.string().optional(),
  /** Passphrase for the passphrase secrets provider. @default generated once into <dataDir>/pulumi-passphrase (0600) */
  passphrase: z.string().min(1).optional(),
  /** Secrets provider URL. @default "passphrase" */
  secretsProvider: z.string().default("passphrase"),
  /** PULUMI_HOME (CLI plugins). @default $PULUMI_HOME */
  pulumiHome: z.string().optional(),
  /** Policy packs attached to every up and preview (mandatory). @default [<repo>/policies] */
  policyPacks: z.array(z.string()).default([OUR_POLICY_PACK]),
  /** JSON config files for the policy packs. */
  policyPackConfigs: z.array(z.string()).default([]),
  /** Extra environment for the engine and providers (DOCKER_HOST, KUBECONFIG, …). */
  env: z.record(z.string(), z.string()).default({}),
});
export type StackManagerOptionsInput = z.input<typeof StackManagerOptions>;

export type ResolvedStackOptions = Required<Omit<z.infer<typeof StackManagerOptions>, "pulumiHome">> & {
  pulumiHome: string | undefined;
  backendDir: string | undefined;
};

export function resolveStackOptions(input: StackManagerOptionsInput): ResolvedStackOptions {
  const o = StackManagerOptions.parse(input);
  mkdirSync(o.dataDir, { recursive: true, mode: 0o700 });
  const backendUrl = o.backendUrl ?? `file://${join(resolve(o.dataDir), "pulumi-state")}`;
  const backendDir = backendUrl.startsWith("file://") ? backendUrl.slice("file://".length) : undefined;
  if (backendDir) mkdirSync(backendDir, { recursive: true, mode: 0o700 });
  return {
    ...o,
    backendUrl,
    backendDir,
    passphrase: o.passphrase ?? process.env.PULUMI_CONFIG_PASSPHRASE ?? passphraseFile(o.dataDir),
    pulumiHome: o.pulumiHome ?? process.env.PULUMI_HOME,
  };
}

function passphraseFile(dataDir: string): string {
  const file = join(dataDir, "pulumi-passphrase");
  if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString("hex"), { mode: 0o600, flag: "wx" });
  return readFileSync(file, "utf8").trim();
}

export const PROJECT_NAME = "agent-sessions";
export const PLUGIN_BIN_DIR = join(repoRoot, "infra", "bin");
