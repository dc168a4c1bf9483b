import { CodedError } from "../../contracts/errors.ts";
import { type BoundedCaller, isAdminCaller } from "./caller-bounds.ts";
import { SlotCounter } from "./slot-counter.ts";

/**
 * The namespaces a caller's scopes name (`namespace:<ns>:edit|view`, `session:<ns>/<name>:chat`):
 * what its event streams count toward. An admin's name none.
 */
export function scopedNamespaces(caller: BoundedCaller | undefined): string[] {
  if (caller === undefined || isAdminCaller(caller)) return [];
  return [...new Set(caller.scopes.flatMap((s) => (s.kind === "admin" ? [] : [s.namespace])))];
}

/**
 * How many of one thing (open event streams, proxied requests in flight) the tokens of one
 * namespace hold together, in this process (issue 34: a tenant minting many tokens gets around
 * the per-token bound, caller-bounds.ts; this one is the namespace's share of the server). An
 * admin is neither counted nor bounded, so a tenant can never lock the operator out. Over the
 * bound is RESOURCE_EXHAUSTED naming the namespace and the setting, before anything is done.
 */
export class NamespaceBounds {
  readonly #slots: SlotCounter;
  readonly #what: string;
  readonly #setting: string;

  /** `what`: the thing held, plural ("requests in flight"); `setting`: the variable that sets `max`. */
  constructor(max: number, what: string, setting: string) {
    this.#slots = new SlotCounter(max);
    this.#what = what;
    this.#setting = setting;
  }

  /**
   * A slot in each of `namespaces` for `caller` (all or none; released by calling the answer,
   * once), or RESOURCE_EXHAUSTED naming the namespace that is full.
   */
  acquire(caller: BoundedCaller | undefined, namespaces: readonly string[]): () => void {
    if (caller === undefined || isAdminCaller(caller)) return () => {};
    const grant = this.#slots.acquire(namespaces);
    if (!grant.ok)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `namespace ${grant.key} holds ${grant.held} ${this.#what}, the most one namespace may (${this.#setting}); end one or retry later`,
        { namespace: grant.key, limit: this.#slots.max },
      );
    return grant.release;
  }
}
