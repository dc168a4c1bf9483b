/**
 * The test bed's Kubernetes cluster is real: a PVC binds through the default StorageClass, a
 * Deployment of a locally built FROM-scratch image becomes Ready as a non-root pod without a
 * service-account token, its ClusterIP Service answers from the host through kube-proxy,
 * `kubectl exec -i` streams stdin and passes the exit code, deleting it all releases the
 * volume, and the host link's guard refused nothing of it (the cluster's network namespace routes
 * nowhere else).
 *
 * Shells out to the kubectl the test bed built (never the machine's) with the KUBECONFIG the
 * test bed gives. No skip: when the cluster is not up, this fails and says so.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  applyTestbedEnv,
  kubectlPath,
  kubernetesNode,
  kubernetesPvDir,
  registry,
} from "../support/testbed.ts";
import { untilSeconds as until } from "../support/until.ts";

applyTestbedEnv();
// The cluster runs containerd, not the test bed's dockerd: the image goes through the registry and
// is pulled by digest. Its node, kubectl and PV directory are its own.
const kubectlBin = kubectlPath();
const node = kubernetesNode();
// Its discovery cache stays in the test bed too (kubectl's default is ~/.kube/cache).
const kubectlCache = ["--cache-dir", join(dirname(process.env.KUBECONFIG ?? ""), "kubectl-cache")];
const localImage = "agent-sessions/kube-smoke-busybox:1";
let image = "";
const ns = `kube-smoke-${process.pid}`;
// The host link's guard (scripts/testbed.d/kubernetes.sh): its LOG rule counts the connections
// from the cluster's network namespace to the host that it refused.
const linkGuardChain = "AGENT-SESSIONS-K135-INPUT";

/** Packets of the LOG rule of the host link's guard: connections from the cluster it refused. */
function guardRefused(): number {
  const out = execFileSync("iptables", ["-w", "10", "-nvxL", linkGuardChain], { encoding: "utf8" });
  const line = out.split("\n").find((l) => l.trim().split(/\s+/)[2] === "LOG");
  if (!line) throw new Error(`no LOG rule in ${linkGuardChain}:\n${out}`);
  return Number(line.trim().split(/\s+/)[0]);
}

function kubectl(args: string[], input?: string): string {
  const r = spawnSync(kubectlBin, [...kubectlCache, ...args], { input, encoding: "utf8", env: process.env });
  if (r.status !== 0) {
    throw new Error(`kubectl ${args.join(" ")} exited ${r.status}: ${r.stderr || r.stdout}`);
  }
  return r.stdout;
}

const manifest = () => `
apiVersion: v1
kind: Namespace
metadata:
  name: ${ns}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: ${ns}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 16Mi
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ${ns}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      automountServiceAccountToken: false
      # busybox httpd as PID 1 ignores SIGTERM: do not wait the default 30 s on delete.
      terminationGracePeriodSeconds: 1
      securityContext:
        runAsNonRoot: true
        runAsUser: 65534
        runAsGroup: 65534
      containers:
      - name: web
        image: ${image}
        imagePullPolicy: IfNotPresent
        command: ["/bin/busybox", "sh", "-c", "echo hello-from-pvc > /data/index.html && exec /bin/busybox httpd -f -p 8080 -h /data"]
        ports:
        - containerPort: 8080
          protocol: TCP
        readinessProbe:
          httpGet: {path: /index.html, port: 8080}
          periodSeconds: 1
        volumeMounts:
        - {name: data, mountPath: /data}
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: data}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: ${ns}
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
    protocol: TCP
`;

let guardBefore = 0;

beforeAll(() => {
  // Fail loudly when the cluster is not there: nothing below would mean anything.
  if (!existsSync(kubectlBin))
    throw new Error(`no test bed kubectl at ${kubectlBin}: run scripts/testbed up kubernetes`);
  if (!process.env.KUBECONFIG || !existsSync(process.env.KUBECONFIG)) {
    throw new Error(`KUBECONFIG (${process.env.KUBECONFIG}) missing: run scripts/testbed up kubernetes`);
  }
  kubectl(["get", "--raw", "/readyz"]);
  const ready = kubectl([
    "get",
    "node",
    node,
    "-o",
    'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
  ]);
  if (ready !== "True") throw new Error(`node ${node} is not Ready (${ready})`);
  guardBefore = guardRefused();
  // A FROM-scratch busybox image built by our dockerd and pushed to the test bed's registry.
  const ctx = mkdtempSync(join(tmpdir(), "kube-smoke-"));
  try {
    copyFileSync("/bin/busybox", join(ctx, "busybox"));
    writeFileSync(
      join(ctx, "Dockerfile"),
      'FROM scratch\nCOPY busybox /bin/busybox\nUSER 65534:65534\nENTRYPOINT ["/bin/busybox"]\n',
    );
    execFileSync("docker", ["build", "-q", "-t", localImage, ctx], { stdio: ["ignore", "ignore", "pipe"] });
    // containerd pulls it from the test bed's registry (through the cluster's relay), by digest.
    const pushed = `${registry}/${localImage}`;
    execFileSync("docker", ["tag", localImage, pushed]);
    execFileSync("docker", ["push", "-q", pushed], { stdio: ["ignore", "ignore", "pipe"] });
    const digests = JSON.parse(
      execFileSync("docker", ["image", "inspect", pushed, "--format", "{{json .RepoDigests}}"], {
        encoding: "utf8",
      }),
    ) as string[];
    image = digests.find((d) => d.startsWith(`${registry}/`)) ?? "";
    if (!image) throw new Error(`no registry digest for ${pushed}: ${digests.join(" ")}`);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
});

afterAll(() => {
  spawnSync(kubectlBin, [...kubectlCache, "delete", "namespace", ns, "--ignore-not-found", "--wait=false"], {
    env: process.env,
  });
});

describe("kubernetes test bed (real single-node cluster)", () => {
  let pvPath = "";
  let pvName = "";

  it("binds a PVC dynamically and brings a non-root Deployment Ready", async () => {
    const t0 = Date.now();
    kubectl(["apply", "-f", "-"], manifest());
    pvName = await until("PVC Bound", 60, () => {
      const [phase, volume] = kubectl([
        "-n",
        ns,
        "get",
        "pvc",
        "data",
        "-o",
        "jsonpath={.status.phase} {.spec.volumeName}",
      ]).split(" ");
      return phase === "Bound" && volume ? volume : undefined;
    });
    const pv = JSON.parse(kubectl(["get", "pv", pvName, "-o", "json"])) as {
      spec: { storageClassName: string; hostPath?: { path: string } };
    };
    expect(pv.spec.storageClassName).toBe("standard");
    pvPath = pv.spec.hostPath?.path ?? "";
    expect(pvPath.startsWith(`${kubernetesPvDir()}/`)).toBe(true);
    await until("Deployment Ready", 120, () =>
      kubectl(["-n", ns, "get", "deploy", "web", "-o", "jsonpath={.status.readyReplicas}"]) === "1"
        ? true
        : undefined,
    );
    console.log(`kubernetes smoke: PVC + Deployment Ready in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
    const pod = JSON.parse(kubectl(["-n", ns, "get", "pods", "-l", "app=web", "-o", "json"])) as {
      items: {
        spec: {
          automountServiceAccountToken?: boolean;
          containers: { volumeMounts?: { mountPath: string }[] }[];
        };
      }[];
    };
    const spec = pod.items[0]?.spec;
    expect(spec?.automountServiceAccountToken).toBe(false);
    expect(spec?.containers[0]?.volumeMounts?.map((m) => m.mountPath)).toEqual(["/data"]);
    // The non-root pod wrote into its volume: the file is on the host, in the PV's directory.
    expect(existsSync(join(pvPath, "index.html"))).toBe(true);
  });

  it("answers on its ClusterIP from the host through kube-proxy", async () => {
    const ip = kubectl(["-n", ns, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    expect(ip).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const body = await until("ClusterIP answer", 30, async () => {
      const res = await fetch(`http://${ip}/index.html`, { signal: AbortSignal.timeout(2000) });
      return res.ok ? await res.text() : undefined;
    });
    expect(body.trim()).toBe("hello-from-pvc");
  });

  it("streams stdin through kubectl exec -i and passes the exit code", () => {
    const r = spawnSync(
      kubectlBin,
      [
        "-n",
        ns,
        "exec",
        "-i",
        "deploy/web",
        "--",
        "/bin/busybox",
        "sh",
        "-c",
        "/bin/busybox cat; /bin/busybox id -u; exit 3",
      ],
      {
        input: "ping\n",
        encoding: "utf8",
        env: process.env,
      },
    );
    expect(r.stdout).toBe("ping\n65534\n");
    expect(r.status).toBe(3);
  });

  it("deletes everything, releases the volume, and the cluster sent nothing off loopback and its bridge", async () => {
    kubectl(["delete", "namespace", ns, "--wait=true", "--timeout=120s"]);
    await until("PV deleted", 60, () =>
      kubectl(["get", "pv", pvName, "--ignore-not-found", "-o", "name"]).trim() === "" ? true : undefined,
    );
    await until("PV directory removed", 30, () => (existsSync(pvPath) ? undefined : true));
    // The cluster's namespace has no route beyond its bridge and the host link, and the link's
    // guard refused nothing of this test's pods (nor of anything else in it meanwhile).
    expect(guardRefused() - guardBefore).toBe(0);
  });
});
