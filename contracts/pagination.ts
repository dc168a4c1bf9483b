import { z } from "zod";

/**
 * Pages of a list: every list route and GetAgentStatus(all) answer at most a page, in a stable
 * order, with a token for the next one. Kubernetes-style lists take `?limit=&continue=` and say
 * `metadata.continue`; the RPC takes `page_size`/`page_token` and says `next_page_token`. No
 * token in the answer: that was the last page.
 */
export const MAX_PAGE_SIZE = 1000;
/** A page when the caller names no size. */
export const DEFAULT_PAGE_SIZE = 500;

export const PageSize = z.coerce
  .number()
  .int()
  .min(1)
  .max(MAX_PAGE_SIZE, `at most ${MAX_PAGE_SIZE} per page`);
/** Opaque to clients: hand back what the previous page said. */
export const PageToken = z
  .string()
  .min(1)
  .max(2048)
  .regex(/^[A-Za-z0-9_-]+$/, "not a page token this server gave");

/** `metadata` of a list answer: `continue` when there is a next page. */
export const ListMetadata = z.object({ continue: z.string().optional() });
export type ListMetadata = z.infer<typeof ListMetadata>;
