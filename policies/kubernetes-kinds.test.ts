/**
 * The pack recognises Kubernetes kinds by type token without loading @pulumi/kubernetes at run
 * time: each token must be exactly the one the SDK's class carries, or a kind would go unjudged.
 */
import * as k8s from "@pulumi/kubernetes";
import { describe, expect, it } from "vitest";
import { KubeKinds } from "./judged-resources.ts";

const classes: Record<keyof typeof KubeKinds, unknown> = {
  Pod: k8s.core.v1.Pod,
  PersistentVolumeClaim: k8s.core.v1.PersistentVolumeClaim,
  Service: k8s.core.v1.Service,
  Secret: k8s.core.v1.Secret,
  ConfigMap: k8s.core.v1.ConfigMap,
  NetworkPolicy: k8s.networking.v1.NetworkPolicy,
  Deployment: k8s.apps.v1.Deployment,
  StatefulSet: k8s.apps.v1.StatefulSet,
  DaemonSet: k8s.apps.v1.DaemonSet,
  ReplicaSet: k8s.apps.v1.ReplicaSet,
  Job: k8s.batch.v1.Job,
  CronJob: k8s.batch.v1.CronJob,
};

describe("Kubernetes kinds by type token", () => {
  it.each(Object.keys(KubeKinds) as (keyof typeof KubeKinds)[])(
    "%s is the token of the SDK's class",
    (name) => {
      expect(KubeKinds[name].type).toBe((classes[name] as { __pulumiType: string }).__pulumiType);
    },
  );

  it("the pack's modules load without @pulumi/kubernetes", async () => {
    const { execFileSync } = await import("node:child_process");
    // A fresh process: which modules the policy list pulls in at run time.
    const loaded = execFileSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { createRequire } from "node:module";
         await import(${JSON.stringify(new URL("./policy-list.ts", import.meta.url).href)});
         const require = createRequire(import.meta.url);
         console.log(Object.keys(require.cache).filter((m) => m.includes("@pulumi/kubernetes")).length);`,
      ],
      { encoding: "utf8" },
    );
    expect(loaded.trim()).toBe("0");
  });
});
