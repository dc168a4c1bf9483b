import type { ResourceValidationPolicy, StackValidationPolicy } from "@pulumi/policy";
import {
  KubeKinds,
  type NetworkPolicy,
  namespaceOf,
  podTemplateOf,
  propsOf,
  validateKinds,
} from "./judged-resources.ts";
import { selects } from "./label-selector.ts";
import {
  forbiddenEgressPortsOf,
  forbiddenEgressPortsSchema,
  sessionPortsOf,
  sessionPortsSchema,
} from "./policy-config.ts";

/**
 * What a session can reach over the network, and who can reach it. Kubernetes: every session pod
 * is isolated by a NetworkPolicy in both directions (a pod no NetworkPolicy selects may talk to
 * anything: kubernetes.io/docs/concepts/services-networking/network-policies), and its Service
 * stays inside the cluster. Docker: the session network is internal and closed to the host.
 * Neither engine lets egress reach a control-plane port.
 */

export const networkPolicySelectsEverySessionPod: StackValidationPolicy = {
  name: "network-policy-selects-every-session-pod",
  description:
    "Every pod the stack runs is selected (podSelector) by a NetworkPolicy of the stack in its " +
    "namespace whose policyTypes include both Ingress and Egress.",
  validateStack: (args, report) => {
    const networkPolicies = args.resources.flatMap((resource) => {
      const policy = propsOf(resource, KubeKinds.NetworkPolicy);
      return policy === undefined ? [] : [{ namespace: namespaceOf(resource), policy }];
    });
    for (const resource of args.resources) {
      const template = podTemplateOf(resource);
      if (template === undefined) continue;
      const namespace = namespaceOf(resource);
      const labels = template.metadata?.labels ?? {};
      const selecting = networkPolicies.filter(
        (candidate) =>
          candidate.namespace === namespace && selects(candidate.policy.spec?.podSelector, labels),
      );
      const shown = JSON.stringify(labels);
      if (selecting.length === 0) {
        report(
          `no NetworkPolicy in namespace ${namespace} selects the pods of ${resource.name} ${shown}`,
          resource.urn,
        );
      } else if (!selecting.some(({ policy }) => isolatesBothWays(policy))) {
        report(
          `the NetworkPolicies selecting the pods of ${resource.name} ${shown} do not list both ` +
            "Ingress and Egress in policyTypes",
          resource.urn,
        );
      }
    }
  },
};

export const egressExcludesControlPlanePorts: ResourceValidationPolicy = {
  name: "egress-excludes-control-plane-ports",
  description:
    "Every NetworkPolicy egress rule names its destinations (to) and explicit numeric ports, and " +
    "no egress (NetworkPolicy rule, Docker network allowedEgress) opens a control-plane port " +
    "(config forbiddenPorts).",
  configSchema: forbiddenEgressPortsSchema,
  validateResource: validateKinds({
    dockerNetwork: (network, report, args) => {
      const forbidden = forbiddenEgressPortsOf(args);
      for (const { address, port } of network.allowedEgress ?? []) {
        if (forbidden.includes(port)) report(`allowedEgress opens control-plane port ${address}:${port}`);
      }
    },
    networkPolicy: (policy, report, args) => {
      const forbidden = forbiddenEgressPortsOf(args);
      for (const [index, rule] of (policy.spec?.egress ?? []).entries()) {
        const where = `egress rule ${index}`;
        if ((rule.to ?? []).length === 0) report(`${where} allows every destination (no "to" peers)`);
        const ports = rule.ports ?? [];
        if (ports.length === 0) report(`${where} allows every port (no "ports")`);
        for (const { port, endPort } of ports) {
          const first = numericPort(port);
          if (first === undefined) {
            // A missing port means all ports; a named port is whatever the destination calls it.
            report(`${where} has port ${port ?? "(all)"}; egress ports must be explicit numbers`);
            continue;
          }
          const hits = forbidden.filter((p) => p >= first && p <= (endPort ?? first));
          if (hits.length > 0) report(`${where} allows control-plane port ${hits.join(", ")}`);
        }
      }
    },
  }),
};

export const ingressFromScopedPeers: ResourceValidationPolicy = {
  name: "ingress-from-scoped-peers",
  description:
    "Every NetworkPolicy ingress rule names its sources (from), and each source is scoped: pods " +
    "picked by a non-empty podSelector (alone: in the policy's namespace; with a namespaceSelector: " +
    "in those namespaces), or an ipBlock narrower than /8. A namespaceSelector alone admits every pod " +
    "of its namespaces, an empty podSelector every pod of the namespace.",
  validateResource: validateKinds({
    networkPolicy: (policy, report) => {
      for (const [index, rule] of (policy.spec?.ingress ?? []).entries()) {
        const where = `ingress rule ${index}`;
        const from = rule.from ?? [];
        if (from.length === 0) report(`${where} admits every source (no "from" peers)`);
        for (const [p, peer] of from.entries()) {
          if (peer.ipBlock) {
            const prefix = Number(peer.ipBlock.cidr?.split("/")[1] ?? "32");
            if (!(prefix >= 8))
              report(`${where} peer ${p} admits ipBlock ${peer.ipBlock.cidr}, wider than /8`);
            continue;
          }
          const pods = peer.podSelector;
          const picks =
            Object.keys(pods?.matchLabels ?? {}).length > 0 || (pods?.matchExpressions ?? []).length > 0;
          if (!picks)
            report(
              peer.namespaceSelector
                ? `${where} peer ${p} admits every pod of the namespaces its namespaceSelector picks`
                : `${where} peer ${p} admits every pod of the namespace (empty podSelector)`,
            );
        }
      }
    },
  }),
};

export const sessionPortsDeclared: ResourceValidationPolicy = {
  name: "session-ports-declared",
  description:
    "A session's Service and its NetworkPolicy's ingress name only the harness's own port and the " +
    "session's declared ports (HarnessSession spec.ports; config harnessPorts, declaredPorts), as " +
    "explicit numbers: nothing else of the session is reachable, not even from the runner.",
  configSchema: sessionPortsSchema,
  validateResource: validateKinds({
    service: (service, report, args) => {
      const allowed = sessionPortsOf(args);
      for (const [index, p] of (service.spec?.ports ?? []).entries()) {
        const port = numericPort(p.port);
        const target = p.targetPort === undefined ? port : numericPort(p.targetPort);
        for (const [what, value, raw] of [
          ["port", port, p.port],
          ["targetPort", target, p.targetPort],
        ] as const)
          if (value === undefined || !allowed.includes(value))
            report(
              `Service port ${index} has ${what} ${String(raw)}, not a declared session port (${allowed.join(", ")})`,
            );
      }
    },
    networkPolicy: (policy, report, args) => {
      const allowed = sessionPortsOf(args);
      for (const [index, rule] of (policy.spec?.ingress ?? []).entries()) {
        const ports = rule.ports ?? [];
        if (ports.length === 0) report(`ingress rule ${index} admits every port (no "ports")`);
        for (const { port, endPort } of ports) {
          const first = numericPort(port);
          if (first === undefined || endPort !== undefined || !allowed.includes(first))
            report(
              `ingress rule ${index} admits port ${String(port ?? "(all)")}${endPort !== undefined ? `-${endPort}` : ""}, not a declared session port (${allowed.join(", ")})`,
            );
        }
      }
    },
  }),
};

export const serviceClusterIpOnly: ResourceValidationPolicy = {
  name: "service-cluster-ip-only",
  description:
    "A session Service is reachable only inside the cluster (type ClusterIP, no externalIPs): " +
    "clients reach sessions through the agent-sessions server, never directly.",
  validateResource: validateKinds({
    service: (service, report) => {
      const type = service.spec?.type ?? "ClusterIP";
      if (type !== "ClusterIP") report(`the Service is of type ${type}, not ClusterIP`);
      const externalIPs = service.spec?.externalIPs ?? [];
      if (externalIPs.length > 0) report(`the Service has externalIPs ${externalIPs.join(", ")}`);
    },
  }),
};

export const dockerInternalNetwork: ResourceValidationPolicy = {
  name: "docker-internal-network",
  description:
    "A Docker session network is internal (no route to other networks) and isolated from the host " +
    "(no connection to host ports through the bridge gateway).",
  validateResource: validateKinds({
    dockerNetwork: (network, report) => {
      if (network.internal !== true) report(`network "${network.name}" does not set internal: true`);
      if (network.isolateFromHost !== true) {
        report(`network "${network.name}" does not set isolateFromHost: true`);
      }
    },
  }),
};

function isolatesBothWays(policy: NetworkPolicy): boolean {
  const types = policy.spec?.policyTypes ?? [];
  return types.includes("Ingress") && types.includes("Egress");
}

/** An IntOrString port as a number; a named port (a string with a letter) is not one. */
function numericPort(port: number | string | undefined): number | undefined {
  if (typeof port === "number") return port;
  if (typeof port === "string" && /^\d+$/.test(port)) return Number(port);
  return undefined;
}
