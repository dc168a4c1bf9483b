/**
 * Whether a session's adapter answers ready (adapter contract v1alpha2, contracts/adapter.ts:
 * `GET /readyz`, 200 when it takes requests, 503 while it drains), as the runner reaches it.
 *
 * Each probe is a connection of its own, closed after the answer (`reset`): probes are how the
 * runner learns that a Service routes, and a connection kept alive from a probe made before it
 * did would be reused by the next probe and by relays. A ClusterIP that kube-proxy has not
 * programmed yet is not an address the node knows: the connection follows the default route to
 * whatever answers there (on the test bed, the sandbox's egress proxy answers 404), and a pooled
 * connection keeps answering that long after the Service routes (seen in CI: a fast create fell
 * back to the pod's address after 15 s of 404s through a Service that was routing all along).
 */
import { request } from "undici";
import { CodedError } from "../../contracts/errors.ts";

/**
 * `path`: `/readyz` for our adapter contract, `/healthz` for an `openai-chat` harness.
 * @default timeoutMs 5000, path "/readyz"
 */
export async function probeAdapter(endpoint: string, timeoutMs = 5_000, path = "/readyz"): Promise<void> {
  let status: number;
  try {
    const res = await request(`http://${endpoint}${path}`, {
      method: "GET",
      reset: true,
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
