/**
 * Pulumi setMocks for component unit tests. Records every resource the program registers; the
 * tests assert on these recorded calls (with the SDK's default fakes, echoed inputs prove nothing).
 */
import * as pulumi from "@pulumi/pulumi";

export type Recorded = { type: string; name: string; inputs: Record<string, unknown>; id: string };

export function installMocks(): Recorded[] {
  const recorded: Recorded[] = [];
  void pulumi.runtime.setMocks(
    {
      newResource(args) {
        const id = `${args.name}-id`;
        const state: Record<string, unknown> = { ...args.inputs };
        if (args.type === "agent-sessions-docker:index:Network")
          Object.assign(state, { gateway: "172.30.0.1", bridge: "br-mock" });
        if (args.type === "agent-sessions-docker:index:Container") {
          Object.assign(state, {
            ipAddress: "172.30.0.2",
            resolvedImageDigest: String(args.inputs.image).split("@")[1],
          });
        }
        if (args.type === "kubernetes:core/v1:Service")
          state.spec = { ...(args.inputs.spec as object), clusterIP: "10.0.0.42" };
        recorded.push({ type: args.type, name: args.name, inputs: args.inputs, id });
        return { id, state };
      },
      call: (args) => args.inputs,
    },
    "agent-sessions",
    "default--test",
    false,
  );
  return recorded;
}

export function outputValue<T>(output: pulumi.Output<T>): Promise<T> {
  return new Promise((resolve) => output.apply((v) => resolve(v)));
}

/** The custom (engine) resources among the recorded ones; components are ours, not the engine's. */
export function custom(recorded: Recorded[]): Recorded[] {
  return recorded.filter((r) => !r.type.startsWith("agent-sessions:"));
}
