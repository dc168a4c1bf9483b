/**
 * The workloads this runner froze (the paused tier, `pause`/`unpause` in proxy/PROTOCOL.md §7),
 * least recently paused first, and its paused-memory budget.
 *
 * A frozen workload cannot answer, and Docker refuses to stop, remove or exec in a paused
 * container: the runner thaws one (`thaw`) before anything that needs it alive: a relayed
 * request, the adapter probe, the workspace files commands, starting or stopping its agent,
 * scale_down and remove. The set is kept on disk (`<data-dir>/paused-workloads.json`) so a
 * restarted runner thaws what it froze before (`thawSaved`, ahead of restoring its agents):
 * a restart never leaves a container frozen for good.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { z } from "zod";
import { KeyedMutex } from "../../contracts/keyed-mutex.ts";
import type { EngineDriver } from "./driver.ts";

export const PAUSED_WORKLOADS_FILE_NAME = "paused-workloads.json";

const PausedFile = z.object({
  version: z.literal(1),
  /** Least recently paused first. */
  paused: z.array(z.object({ container_name: z.string(), paused_at: z.number() })),
});

export type PausedWorkloadsOptions = {
  /** Where the set is kept across restarts; none: in memory only. */
  file?: string;
  /** Bytes the paused workloads may hold together; 0: no budget. @default 0 */
  budgetBytes?: number;
  /** @default Date.now */
  now?: () => number;
};

export type PauseOutcome = {
  /** The paused workload's memory as the engine counts it, when it does. */
  memoryBytes?: number;
  /** Paused workloads over the budget, least recently paused first (never a running one). */
  evict: string[];
};

export class PausedWorkloads {
  readonly #driver: Pick<EngineDriver, "pause" | "unpause" | "memoryBytes">;
  readonly #file: string | undefined;
  readonly #budget: number;
  readonly #now: () => number;
  /** containerName → when it was paused; Map order is pause order (least recent first). */
  readonly #paused = new Map<string, number>();
  /** Pause and thaw of one workload, one at a time, in arrival order. */
  readonly #ops = new KeyedMutex();

  constructor(
    driver: Pick<EngineDriver, "pause" | "unpause" | "memoryBytes">,
    options: PausedWorkloadsOptions = {},
  ) {
    this.#driver = driver;
    this.#file = options.file;
    this.#budget = options.budgetBytes ?? 0;
    this.#now = options.now ?? Date.now;
  }

  has(containerName: string): boolean {
    return this.#paused.has(containerName);
  }

  /** The paused workloads, least recently paused first. */
  list(): string[] {
    return [...this.#paused.keys()];
  }

  /**
   * Freezes the workload, then checks the budget: when the paused workloads' memory is over it,
   * the least recently paused ones are named to evict until the rest fit (the one just paused
   * last of all).
   */
  async pause(containerName: string): Promise<PauseOutcome> {
    await this.#ops.run(containerName, async () => {
      await this.#driver.pause(containerName);
      this.#paused.delete(containerName);
      this.#paused.set(containerName, this.#now());
      this.#save();
    });
    const memoryBytes = await this.#driver.memoryBytes(containerName).catch(() => undefined);
    return { ...(memoryBytes !== undefined ? { memoryBytes } : {}), evict: await this.#overBudget() };
  }

  /** Thaws the workload when this runner froze it; true when it did. Cheap when it is not paused. */
  async thaw(containerName: string): Promise<boolean> {
    if (!this.#paused.has(containerName) && !this.#ops.busy(containerName)) return false;
    return this.#ops.run(containerName, async () => {
      if (!this.#paused.has(containerName)) return false;
      await this.#driver.unpause(containerName);
      this.#paused.delete(containerName);
      this.#save();
      return true;
    });
  }

  /** At the runner's start: thaws every workload the set on disk says it froze before. */
  async thawSaved(): Promise<string[]> {
    for (const name of this.#load()) this.#paused.set(name, 0);
    const thawed: string[] = [];
    for (const name of [...this.#paused.keys()]) {
      await this.#driver.unpause(name).catch(() => undefined); // gone since: nothing to thaw
      this.#paused.delete(name);
      thawed.push(name);
    }
    this.#save();
    return thawed;
  }

  async #overBudget(): Promise<string[]> {
    if (this.#budget <= 0) return [];
    const sized: { name: string; bytes: number }[] = [];
    for (const name of this.#paused.keys())
      sized.push({ name, bytes: (await this.#driver.memoryBytes(name).catch(() => undefined)) ?? 0 });
    let total = sized.reduce((sum, s) => sum + s.bytes, 0);
    const evict: string[] = [];
    for (const s of sized) {
      if (total <= this.#budget) break;
      evict.push(s.name);
      total -= s.bytes;
    }
    return evict;
  }

  #load(): string[] {
    if (!this.#file) return [];
    let text: string;
    try {
      text = readFileSync(this.#file, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw error;
    }
    const parsed = PausedFile.safeParse(JSON.parse(text));
    if (!parsed.success)
      throw new Error(`${this.#file} is not a paused-workloads file: ${parsed.error.message}`);
    return parsed.data.paused.map((p) => p.container_name);
  }

  #save(): void {
    if (!this.#file) return;
    mkdirSync(dirname(this.#file), { recursive: true, mode: 0o700 });
    const aside = `${this.#file}.${process.pid}.tmp`;
    const paused = [...this.#paused].map(([container_name, paused_at]) => ({ container_name, paused_at }));
    writeFileSync(aside, `${JSON.stringify({ version: 1, paused })}\n`, { mode: 0o600 });
    renameSync(aside, this.#file);
  }
}
