/**
 * Tokens the program generates itself: random bytes from node:crypto, kept only as Pulumi secrets
 * (encrypted in the stack state) and in Kubernetes Secrets. A program runs on every `up` and draws
 * new bytes each time; the Secrets ignore changes to their generated keys, so the first values
 * stay until someone rotates them on purpose (`pulumi up --replace <urn of the Secret>`).
 */
import { randomBytes } from "node:crypto";
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";

/** 32 random bytes, base64url: 43 characters, well over the server's 16-character minimum. */
export function generateToken(): string {
  return randomBytes(32).toString("base64url");
}

export interface GeneratedSecretArgs {
  metadata: k8s.types.input.meta.v1.ObjectMeta;
  /** Keys filled with a generated token on create and never changed by later runs. */
  generated: string[];
  /** Keys whose values follow the program on every run (e.g. the server URL). */
  plain?: Record<string, pulumi.Input<string>>;
}

/** A Secret with generated keys. Its `values` output is a Pulumi secret. */
export class GeneratedSecret extends pulumi.ComponentResource {
  readonly secret: k8s.core.v1.Secret;
  /** The Secret's keys and values as stored (generated ones as first drawn). Secret. */
  readonly values: pulumi.Output<Record<string, string>>;

  constructor(name: string, args: GeneratedSecretArgs, opts?: pulumi.ComponentResourceOptions) {
    super("agent-sessions:control-plane:GeneratedSecret", name, {}, opts);
    // `data` (base64), not `stringData`: the provider folds stringData into data when it checks
    // inputs, so only a path under `data` names the same value in the old and the new inputs.
    const base64 = (v: string) => Buffer.from(v, "utf8").toString("base64");
    const data = pulumi.all(args.plain ?? {}).apply((plain) => ({
      ...Object.fromEntries(args.generated.map((k) => [k, base64(generateToken())])),
      ...Object.fromEntries(Object.entries(plain).map(([k, v]) => [k, base64(v)])),
    }));
    this.secret = new k8s.core.v1.Secret(
      name,
      { metadata: args.metadata, type: "Opaque", data: pulumi.secret(data) },
      { parent: this, ignoreChanges: args.generated.map((k) => `data.${k}`) },
    );
    // Every key as stored in the cluster (generated ones as first drawn).
    this.values = pulumi.secret(
      this.secret.data.apply((data) =>
        Object.fromEntries(
          Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString("utf8")]),
        ),
      ),
    );
    this.registerOutputs({ values: this.values });
  }
}
