import { z } from "zod";
import { ListMetadata } from "./pagination.ts";

/**
 * Runners as placement targets: the labels a runner advertises, the selector a workspace asks
 * for, and the admin view of a runner (`GET /v1/runners`). Labels follow Kubernetes' syntax so a
 * selector reads the same on both engines.
 */

/** A runner's name (`agent-sessions runner --name`, default the host name): its identity across reconnects. */
export const RunnerName = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/, "letters, digits, '-', '_' and '.' only");

const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_PREFIX = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** `name` or `prefix/name` (prefix a DNS subdomain of at most 253, name at most 63 characters). */
export const LabelKey = z
  .string()
  .min(1)
  .max(317)
  .refine(
    (key) => {
      const slash = key.lastIndexOf("/");
      const name = slash < 0 ? key : key.slice(slash + 1);
      const prefix = slash < 0 ? undefined : key.slice(0, slash);
      return (
        LABEL_NAME.test(name) && (prefix === undefined || (prefix.length <= 253 && LABEL_PREFIX.test(prefix)))
      );
    },
    { message: "must be NAME or PREFIX/NAME (NAME: up to 63 of letters, digits, '-', '_', '.')" },
  );
/** Empty, or up to 63 of letters, digits, '-', '_', '.' starting and ending alphanumeric. */
export const LabelValue = z
  .string()
  .max(63)
  .regex(
    /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/,
    "must be empty or letters, digits, '-', '_', '.' (alphanumeric at both ends)",
  );

/** A map of labels whose every key and value is checked, each problem naming its key. */
function labelMap(max: number) {
  return z.record(z.string(), z.string()).superRefine((labels, ctx) => {
    const entries = Object.entries(labels);
    if (entries.length > max) ctx.addIssue({ code: "custom", message: `at most ${max} labels` });
    for (const [key, value] of entries) {
      const k = LabelKey.safeParse(key);
      if (!k.success)
        ctx.addIssue({ code: "custom", path: [key], message: `key "${key}" ${k.error.issues[0]?.message}` });
      const v = LabelValue.safeParse(value);
      if (!v.success)
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: `value "${value}" ${v.error.issues[0]?.message}`,
        });
    }
  });
}

/** What a runner advertises (`--label key=value`). */
export const RunnerLabels = labelMap(64);
export type RunnerLabels = z.infer<typeof RunnerLabels>;

/** Equality-based selector: a runner matches when it has every key with the same value. `{}` matches any. */
export const RunnerSelector = labelMap(16);
export type RunnerSelector = z.infer<typeof RunnerSelector>;

export function selectorMatches(selector: RunnerSelector | undefined, labels: RunnerLabels): boolean {
  if (!selector) return true;
  return Object.entries(selector).every(
    ([key, value]) => Object.hasOwn(labels, key) && labels[key] === value,
  );
}

/** `{zone=b,gpu=true}`: how messages name a selector or a runner's labels. */
export function formatLabels(labels: Record<string, string> | undefined): string {
  return `{${Object.entries(labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(",")}}`;
}

/** One runner as the admin API shows it. */
export const RunnerInfo = z.object({
  runner_id: z.string(),
  runner_name: z.string(),
  engine: z.enum(["docker", "kubernetes"]),
  /** How many workspaces it takes. */
  capacity: z.number().int().nonnegative(),
  labels: z.record(z.string(), z.string()),
  /** Workspaces placed on it (any state: a stopped session's workspace keeps its place). */
  load: z.number().int().nonnegative(),
  /** Its agent sessions that are not STOPPED or ERRORED. */
  live_sessions: z.number().int().nonnegative(),
  /** Attached now (a runner that dialed once is remembered after it goes away). */
  connected: z.boolean(),
  /** Keeps its live sessions but takes no new placement; survives server restarts. */
  draining: z.boolean(),
  /** When it last said hello. */
  last_seen_at: z.string(),
});
export type RunnerInfo = z.infer<typeof RunnerInfo>;

export const RunnerList = z.object({ metadata: ListMetadata.optional(), items: z.array(RunnerInfo) });
export type RunnerList = z.infer<typeof RunnerList>;

/** `POST /v1/runners/{runner}:drain` and `:undrain`; `{runner}` is a runner's name or id. */
export const RunnerAction = z.enum(["drain", "undrain"]);
export type RunnerAction = z.infer<typeof RunnerAction>;

/**
 * `POST /v1/runners/{name}/token` (201): a new credential for runner `name` — shown once, never
 * stored in the clear. The name's older credential stops working and its link is closed.
 */
export const RunnerTokenIssued = z.object({ runner_name: z.string(), token: z.string() });
export type RunnerTokenIssued = z.infer<typeof RunnerTokenIssued>;

/**
 * `DELETE /v1/runners/{name}/token`: the name's credential is forgotten and its link closed; the
 * name may then be registered again with the runner token.
 */
export const RunnerTokenRevoked = z.object({ runner_name: z.string(), revoked: z.boolean() });
export type RunnerTokenRevoked = z.infer<typeof RunnerTokenRevoked>;
