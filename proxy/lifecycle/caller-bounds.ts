import type { ParsedScope } from "../../contracts/access.ts";
import { CodedError } from "../../contracts/errors.ts";
import { SlotCounter } from "./slot-counter.ts";

/** Who holds a slot: the principal of a request (proxy/http/api-tokens.ts), by token id and scopes. */
export type BoundedCaller = { id: string; scopes: readonly ParsedScope[] };

/** An admin (the admin token, or an API token with scope `admin`): never bounded per token. */
export function isAdminCaller(caller: BoundedCaller | undefined): boolean {
  return caller?.scopes.some((s) => s.kind === "admin") ?? false;
}

/**
 * How many of one thing (open event streams, proxied requests in flight) one API token holds at
 * once, in this process (issue 34: one chat token took every event stream and had 60 requests in
 * flight). An admin is not bounded here, so a tenant can never lock the operator out. Over the
 * bound is RESOURCE_EXHAUSTED naming the setting, before anything is done.
 */
export class CallerBounds {
  readonly #slots: SlotCounter;
  readonly #what: string;
  readonly #setting: string;

  /** `what`: the thing held, plural ("event streams"); `setting`: the variable that sets `max`. */
  constructor(max: number, what: string, setting: string) {
    this.#slots = new SlotCounter(max);
    this.#what = what;
    this.#setting = setting;
  }

  /** A slot for `caller` (released by calling the answer, once), or RESOURCE_EXHAUSTED. */
  acquire(caller: BoundedCaller | undefined): () => void {
    if (caller === undefined || isAdminCaller(caller)) return () => {};
    const grant = this.#slots.acquire([caller.id]);
    if (!grant.ok)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `this token holds ${grant.held} ${this.#what}, the most one token may (${this.#setting}); end one or retry later`,
        { limit: this.#slots.max },
      );
    return grant.release;
  }
}
