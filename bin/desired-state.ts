import type { DesiredState } from "../contracts/harness-session.ts";
import { contextFrom } from "./cli-context.ts";
import { parseCommand, positionals } from "./command.ts";
import { waitForPhase } from "./wait.ts";

/**
 * What `stop`, `resume`, `pause` and `wake` share: a merge patch of `spec.desiredState`, then (unless --no-wait)
 * the phase changes until the controller settled it.
 */
export async function setDesiredState(
  argv: string[],
  usage: string,
  desired: DesiredState,
  verb: "stop" | "resume" | "pause" | "wake" = desired === "stopped" ? "stop" : "resume",
): Promise<number> {
  const parsed = parseCommand(argv, usage, {
    "no-wait": { type: "boolean", default: false },
    timeout: { type: "string", default: "10m" },
  });
  const [name = ""] = positionals(parsed.positionals, ["SESSION"], usage);
  const ctx = contextFrom(parsed.values);
  const patched = await ctx.client.patch("harnesssessions", ctx.namespace, name, {
    spec: { desiredState: desired },
  });
  let session = patched;
  if (!parsed.values["no-wait"])
    session = await waitForPhase(
      ctx,
      ctx.namespace,
      name,
      PHASE_OF[desired],
      parsed.values.timeout,
      patched.metadata.generation,
    );
  if (ctx.json)
    ctx.out(
      JSON.stringify({ name, namespace: ctx.namespace, desiredState: desired, phase: session.status.phase }),
    );
  else if (!ctx.quiet)
    ctx.out(
      parsed.values["no-wait"]
        ? `harnesssession/${name} ${verb} requested (phase ${session.status.phase})`
        : `harnesssession/${name} ${DONE[verb]} (phase ${session.status.phase})`,
    );
  return 0;
}

/** The phase each desired state settles in. */
const PHASE_OF = { running: "Ready", paused: "Paused", stopped: "Stopped" } as const satisfies Record<
  DesiredState,
  string
>;
const DONE = { stop: "stopped", resume: "resumed", pause: "paused", wake: "woken" } as const;
