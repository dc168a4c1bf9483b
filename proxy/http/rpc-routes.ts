import { Hono } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import { Rpc, RpcMethod } from "../../contracts/rpc.ts";
import type { RpcHandlers } from "../lifecycle/lifecycle.ts";
import { parseInput, readJson } from "../lifecycle/request-body.ts";
import type { RpcAccess } from "./rpc-access.ts";

/**
 * `POST /v1/rpc/{Method}`: the body is parsed with the method's schema, then the caller's token is
 * checked against the namespace owning what the call names (rpc-access.ts), before the handler
 * runs, so a rejected request changes nothing.
 */
export function rpcRoutes(handlers: RpcHandlers, access: RpcAccess): Hono {
  return new Hono().post("/:method", async (c) => {
    const name = c.req.param("method");
    const method = RpcMethod.safeParse(name);
    if (!method.success)
      throw new CodedError("NOT_FOUND", `unknown RPC ${name}; one of ${RpcMethod.options.join(", ")}`);
    const m = method.data;
    const request = parseInput(Rpc[m].request, await readJson(c), `${m} request`);
    const decision = await access.decide(c.get("principal"), m, request);
    // One dispatch for every method: the handler table is keyed like Rpc.
    const handler = handlers[m] as (request: unknown, caller: unknown) => Promise<unknown>;
    const answer = decision.run ? await handler(request, decision.caller) : decision.answer;
    return c.json(Rpc[m].response.parse(answer) as Record<string, unknown>);
  });
}
