import type { GatewayUsage, ResultRecord, Usage } from "../../contracts/adapter.ts";
import type { GatewayUsageReport } from "../../contracts/runner-protocol.ts";

/**
 * The model calls the runner's gateway reported for one relayed request (issue 35), and the
 * result record as the server answers it: `usage` is the gateway's count when it saw any call,
 * `claimed_usage` what the adapter said. An adapter can claim neither `source: "gateway"` nor
 * `claimed_usage`: both are the server's to write.
 */
export class GatewayTally {
  #calls = 0;
  #reported = 0;
  #input = 0;
  #output = 0;
  #model: string | undefined;

  add(report: Pick<GatewayUsageReport, "usage" | "model">): void {
    this.#calls++;
    if (report.usage === "unavailable") return;
    this.#reported++;
    this.#input += report.usage.input_tokens;
    this.#output += report.usage.output_tokens;
    this.#model = report.model;
  }

  /** The gateway's usage of the request; undefined when it saw no call of it. */
  usage(): GatewayUsage | "unavailable" | undefined {
    if (this.#calls === 0) return undefined;
    if (this.#reported === 0) return "unavailable";
    return {
      input_tokens: this.#input,
      output_tokens: this.#output,
      source: "gateway",
      model_calls: this.#reported,
      ...(this.#model !== undefined ? { model: this.#model } : {}),
    };
  }

  /** The adapter's record as the server answers it (see the class). */
  served(record: ResultRecord): ResultRecord {
    const { claimed_usage: _ignored, ...rest } = record;
    const claimed = claimedUsage(record);
    const counted = this.usage();
    return counted === undefined
      ? { ...rest, usage: claimed }
      : { ...rest, usage: counted, claimed_usage: claimed };
  }
}

/** What the adapter claimed, as plain Usage: whatever else it wrote into it is dropped. */
export function claimedUsage(record: ResultRecord): Usage {
  const usage = record.usage;
  return usage === "unavailable"
    ? "unavailable"
    : { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens };
}
