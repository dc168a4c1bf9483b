import { allows, type Need, readableNamespaces } from "../../contracts/access.ts";
import { CodedError } from "../../contracts/errors.ts";
import { parseAgentRef } from "../../contracts/resources.ts";
import type { Rpc, RpcMethod } from "../../contracts/rpc.ts";
import type { z } from "zod";
import { harnessWorkstream } from "../harness/harness-reconciler.ts";
import type { RpcCaller } from "../lifecycle/lifecycle.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";
import type { Principal } from "./api-tokens.ts";
import { permissionDenied } from "./route-access.ts";

/** Who owns a container or agent session: its Agent's namespace, and the HarnessSession it serves. */
type Owner = { namespace: string; harnessSession?: string; harnessUid?: string };

/** `read` (status, files): the owner's view; `write` (start, stop, send, remove, upload): its edit. */
export type OwnedAction = "read" | "write";

/**
 * What an RPC answers without running: what its handler answers for a container or session that
 * does not exist (an idempotent stop or remove), so one in another namespace looks the same.
 */
export type RpcDecision = { run: true; caller: RpcCaller } | { run: false; answer: unknown };

export type RpcAccessOptions = { store: Store; harness?: HarnessStore | undefined };

/**
 * The RPCs and `/v1/workspaces/{container_name}/…` for scoped tokens (issue 17): their
 * `container_name` and `session_id` are global, so each call is decided by the namespace that
 * owns what it names (ProvisionAgentWorkspace and SpawnAgent by their `agent_ref`'s).
 *
 * - A container or session the token may not even read answers exactly as one that does not
 *   exist (NOT_FOUND with the handler's own message, or the idempotent STOPPED / removed:false),
 *   so nothing says what exists in another namespace.
 * - One it may read but not write is PERMISSION_DENIED naming the missing scope (it may see it).
 * - Reading needs the namespace's view or edit, or the chat scope of the HarnessSession whose
 *   workspace it is; writing needs the namespace's edit.
 * - GetAgentStatus without `session_id` lists the sessions of the namespaces the token can view.
 */
export class RpcAccess {
  readonly #o: RpcAccessOptions;

  constructor(options: RpcAccessOptions) {
    this.#o = options;
  }

  async decide<M extends RpcMethod>(
    principal: Principal,
    method: M,
    request: z.infer<(typeof Rpc)[M]["request"]>,
  ): Promise<RpcDecision> {
    if (isAdmin(principal)) return { run: true, caller: {} };
    const run: RpcDecision = { run: true, caller: { namespaces: readableNamespaces(principal.scopes) } };
    const what = `call ${method}`;
    // One switch over the method name; each request is the method's own schema's output.
    const r = request as Record<string, unknown>;
    switch (method) {
      case "ProvisionAgentWorkspace":
      case "SpawnAgent": {
        const { namespace } = parseAgentRef(String(r.agent_ref));
        const need: Need = { kind: "namespace", namespace, action: "edit" };
        if (!allows(principal.scopes, need)) throw permissionDenied(principal, what, need);
        return run;
      }
      case "StartAgentSession": {
        const container = String(r.container_name);
        await this.#assertContainer(principal, container, "write", what, () =>
          notFound(`container ${container} not found`),
        );
        const resume = r.resume_session_id;
        if (typeof resume === "string")
          // A session of another namespace is resumed nowhere: as if it did not exist.
          await this.#assertSession(principal, resume, "read", what, () =>
            notFound(`session ${resume} not found`),
          );
        return run;
      }
      case "RemoveAgentWorkspace": {
        const container = String(r.container_name);
        const absent = { container_name: container, removed: false };
        const owner = await this.#ownerOfContainer(container);
        return this.#decideOwned(principal, owner, "write", what, run, absent);
      }
      case "StopAgentSession": {
        const id = String(r.session_id);
        const owner = await this.#ownerOfSession(id);
        return this.#decideOwned(principal, owner, "write", what, run, { session_id: id, state: "STOPPED" });
      }
      case "ReloadAgentSession":
      case "SendAgentMessage": {
        const id = String(r.session_id);
        await this.#assertSession(principal, id, "write", what, () => notFound(`session ${id} not found`));
        return run;
      }
      case "GetAgentStatus": {
        const id = r.session_id;
        if (typeof id === "string")
          await this.#assertSession(principal, id, "read", what, () => notFound(`session ${id} not found`));
        return run;
      }
      default: {
        const unreachable: never = method;
        return unreachable;
      }
    }
  }

  /**
   * `/v1/workspaces/{container_name}/…`: throws what the files API answers for a workspace that
   * does not exist when the token may not read this one, PERMISSION_DENIED when it may read but
   * not write.
   */
  async assertWorkspace(
    principal: Principal,
    container: string,
    action: OwnedAction,
    what: string,
  ): Promise<void> {
    if (isAdmin(principal)) return;
    await this.#assertContainer(principal, container, action, what, () =>
      notFound(`workspace ${container} not found`),
    );
  }

  async #assertContainer(
    principal: Principal,
    container: string,
    action: OwnedAction,
    what: string,
    absent: () => never,
  ): Promise<void> {
    const owner = await this.#ownerOfContainer(container);
    if (!this.#may(principal, owner, "read")) absent();
    if (!this.#may(principal, owner, action)) throw permissionDenied(principal, what, needOf(owner, action));
  }

  async #assertSession(
    principal: Principal,
    id: string,
    action: OwnedAction,
    what: string,
    absent: () => never,
  ): Promise<void> {
    const owner = await this.#ownerOfSession(id);
    if (!this.#may(principal, owner, "read")) absent();
    if (!this.#may(principal, owner, action)) throw permissionDenied(principal, what, needOf(owner, action));
  }

  #decideOwned(
    principal: Principal,
    owner: Owner | undefined,
    action: OwnedAction,
    what: string,
    run: RpcDecision,
    absent: unknown,
  ): RpcDecision {
    if (!this.#may(principal, owner, "read")) return { run: false, answer: absent };
    if (!this.#may(principal, owner, action)) throw permissionDenied(principal, what, needOf(owner, action));
    return run;
  }

  #may(principal: Principal, owner: Owner | undefined, action: OwnedAction): owner is Owner {
    return owner !== undefined && allows(principal.scopes, needOf(owner, action));
  }

  async #ownerOfContainer(container: string): Promise<Owner | undefined> {
    const workspace = await this.#o.store.getWorkspace(container);
    if (!workspace) return undefined;
    return this.#owner(workspace.agent_ref, container);
  }

  /** A session's namespace is its Agent's, even after its workspace was removed. */
  async #ownerOfSession(id: string): Promise<Owner | undefined> {
    const session = await this.#o.store.getSession(id);
    if (!session) return undefined;
    return this.#owner(session.agent_ref, session.container_name);
  }

  /**
   * The HarnessSession a container serves is the one whose record names it (a workstream called
   * `harness-…` made over the RPCs serves none).
   */
  async #owner(agentRef: string, container: string): Promise<Owner> {
    const { namespace } = parseAgentRef(agentRef);
    const workspace = await this.#o.store.getWorkspace(container);
    const prefix = harnessWorkstream("");
    if (!workspace?.workstream.startsWith(prefix) || !this.#o.harness) return { namespace };
    const name = workspace.workstream.slice(prefix.length);
    const record = await this.#o.harness.getHarnessSession(namespace, name);
    return record?.container_name === container
      ? { namespace, harnessSession: name, harnessUid: record.uid }
      : { namespace };
  }
}

function needOf(owner: Owner, action: OwnedAction): Need {
  if (action === "write") return { kind: "namespace", namespace: owner.namespace, action: "edit" };
  return owner.harnessSession === undefined
    ? { kind: "namespace", namespace: owner.namespace, action: "view" }
    : // A chat token bound to an earlier session of that name reads nothing of this one.
      {
        kind: "session",
        namespace: owner.namespace,
        name: owner.harnessSession,
        action: "view",
        uid: owner.harnessUid,
      };
}

function isAdmin(principal: Principal): boolean {
  return principal.scopes.some((s) => s.kind === "admin");
}

function notFound(message: string): never {
  throw new CodedError("NOT_FOUND", message);
}
