/**
 * Whether a session's adapter answers ready (adapter contract v1alpha2, contracts/adapter.ts:
 * `GET /readyz`, 200 when it takes requests, 503 while it drains), as the runner reaches it.
 */
import { request } from "undici";
import { CodedError } from "../contracts/errors.ts";

/** @default timeoutMs 5000 */
export async function probeAdapter(endpoint: string, timeoutMs = 5_000): Promise<void> {
  let status: number;
  try {
    const res = await request(`http://${endpoint}/readyz`, {
      method: "GET",
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    status = res.statusCode;
    await res.body.dump();
  } catch (error) {
    throw new CodedError(
      "UNAVAILABLE",
      `the adapter at ${endpoint} did not answer: ${(error as Error).message}`,
    );
  }
  if (status !== 200)
    throw new CodedError("UNAVAILABLE", `the adapter at ${endpoint} is not ready (HTTP ${status})`);
}
