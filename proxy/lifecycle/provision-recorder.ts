import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import type { CommandOutcome } from "./runner-directory.ts";
import type { RunnerRecord } from "../store/store.ts";

/**
 * A RunnerDirectory that remembers what each successful `provision` resolved the image to
 * (the runner's result carries `resolved_image_digest`), so the HarnessSession controller can
 * report the digest the engine actually ran without the workspace RPCs having to return it.
 */
export class ProvisionRecorder implements RunnerDirectory {
  readonly #inner: RunnerDirectory;
  readonly #digests = new Map<string, string>();

  constructor(inner: RunnerDirectory) {
    this.#inner = inner;
  }

  connectedRunners(): RunnerRecord[] {
    return this.#inner.connectedRunners();
  }

  isConnected(runnerId: string): boolean {
    return this.#inner.isConnected(runnerId);
  }

  async command<C extends RunnerCommand>(
    runnerId: string,
    command: C,
    timeoutMs?: number,
    bulk?: Uint8Array,
  ): Promise<CommandOutcome<C>> {
    const outcome = await this.#inner.command(runnerId, command, timeoutMs, bulk);
    if ((command.kind === "provision" || command.kind === "claim_warm") && outcome.ok) {
      const result = outcome.result as { container_name?: string; resolved_image_digest?: string };
      // A warm-pool claim names its container in the result.
      const container = command.kind === "provision" ? command.container_name : result.container_name;
      if (result.resolved_image_digest && container)
        this.#digests.set(container, result.resolved_image_digest);
    }
    return outcome;
  }

  /** The digest the last successful provision of a container resolved; forgotten once read. */
  takeResolvedDigest(containerName: string): string | undefined {
    const digest = this.#digests.get(containerName);
    this.#digests.delete(containerName);
    return digest;
  }
}
