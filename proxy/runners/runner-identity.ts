/**
 * Who a runner link belongs to (PROTOCOL.md §1, §2). Every runner has its own credential, kept in
 * the store as a hash only. The shared runner token is a registration token: it opens the link,
 * and a runner that presents it may take a runner name that holds no credential yet — the server
 * then issues that runner its own credential in `welcome`. From then on the name is bound to that
 * credential: a link that presents another credential, or the registration token again, with
 * that name is refused, and the runner that holds the name is left alone.
 */
import { createHash, randomBytes } from "node:crypto";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import { RUNNER_CREDENTIAL_PREFIX } from "../../contracts/runner-protocol.ts";
import { bearerToken, identifyCaller } from "./bearer.ts";
import type { Store } from "../store/store.ts";

/** A new per-runner credential: 256 random bits. */
export function mintRunnerCredential(): string {
  return `${RUNNER_CREDENTIAL_PREFIX}${randomBytes(32).toString("base64url")}`;
}

/**
 * What the store keeps of a credential. An unsalted SHA-256 is enough here: the credential is
 * 256 random bits, so there is no dictionary to try against a leaked hash.
 */
export function hashRunnerCredential(credential: string): string {
  return createHash("sha256").update(credential).digest("hex");
}

/** What a link authenticated with at its upgrade. */
export type RunnerIdentity =
  /** The shared runner token: may register one runner name that holds no credential. */
  | { kind: "registration" }
  /** A runner's own credential: the link speaks for that runner name only. */
  | { kind: "credential"; runnerName: string; tokenHash: string };

export type Authenticated = { ok: true; identity: RunnerIdentity } | { ok: false; error: ApiErrorBody };

/**
 * Whether the runner token registers new runner names (`open`), or only credentials an admin
 * issued open the link (`closed`: a stolen runner token then opens nothing).
 */
export type RunnerRegistration = "open" | "closed";

/** The upgrade's bearer: the registration token, a runner's credential, or a refusal. */
export async function authenticateRunner(
  authorization: string | undefined,
  tokens: { adminToken: string; runnerToken: string },
  store: Pick<Store, "findRunnerCredential">,
  registration: RunnerRegistration = "open",
): Promise<Authenticated> {
  const caller = identifyCaller(authorization, tokens);
  if (caller === "runner" && registration === "closed")
    return {
      ok: false,
      error: {
        code: "PERMISSION_DENIED",
        message:
          "runner registration is closed on this server: present the runner's own credential (agent-sessions runners token create NAME)",
      },
    };
  if (caller === "admin")
    return {
      ok: false,
      error: { code: "PERMISSION_DENIED", message: "the admin token cannot connect as a runner" },
    };
  if (caller === "runner") return { ok: true, identity: { kind: "registration" } };
  const refused: Authenticated = {
    ok: false,
    error: {
      code: "UNAUTHENTICATED",
      message: "a runner token or a runner credential is required (Authorization: Bearer)",
    },
  };
  const token = bearerToken(authorization);
  if (caller === "anonymous" || token === undefined || !token.startsWith(RUNNER_CREDENTIAL_PREFIX))
    return refused;
  const tokenHash = hashRunnerCredential(token);
  const runnerName = await store.findRunnerCredential(tokenHash);
  return runnerName === undefined
    ? refused
    : { ok: true, identity: { kind: "credential", runnerName, tokenHash } };
}

export type Admission =
  /** `issued`: the credential minted for a runner that registered with the registration token. */
  | { ok: true; identity: Extract<RunnerIdentity, { kind: "credential" }>; issued?: string }
  | { ok: false; reason: string };

/**
 * May this link say `hello` as `runnerName`? A credential speaks only for its own name (and only
 * while it is still that name's credential); the registration token only takes a name that
 * holds no credential, and the name is then bound to a credential issued here.
 */
export async function admitHello(
  identity: RunnerIdentity,
  runnerName: string,
  store: Pick<Store, "claimRunnerCredential" | "findRunnerCredential">,
): Promise<Admission> {
  if (identity.kind === "credential") {
    if (identity.runnerName !== runnerName)
      return {
        ok: false,
        reason: `the credential belongs to runner ${identity.runnerName}, not to ${runnerName}`,
      };
    if ((await store.findRunnerCredential(identity.tokenHash)) !== runnerName)
      return { ok: false, reason: `the credential of runner ${runnerName} was revoked` };
    return { ok: true, identity };
  }
  const issued = mintRunnerCredential();
  const tokenHash = hashRunnerCredential(issued);
  if (!(await store.claimRunnerCredential(runnerName, tokenHash)))
    return {
      ok: false,
      reason: `runner name ${runnerName} is registered to another credential; the runner holding it must present it (an admin can issue a new one: agent-sessions runners token create ${runnerName})`,
    };
  return { ok: true, identity: { kind: "credential", runnerName, tokenHash }, issued };
}

/**
 * An admin issues `runnerName` a new credential (`agent-sessions runners token create`): the
 * name's old credential stops working at once. The name need not have attached yet.
 */
export async function issueRunnerCredential(
  store: Pick<Store, "replaceRunnerCredential">,
  runnerName: string,
): Promise<{ credential: string; tokenHash: string }> {
  const credential = mintRunnerCredential();
  const tokenHash = hashRunnerCredential(credential);
  await store.replaceRunnerCredential(runnerName, tokenHash);
  return { credential, tokenHash };
}
