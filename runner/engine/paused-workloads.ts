/**
 * The workloads this runner froze (the paused tier, `pause`/`paused_memory`/`unpause` in
 * proxy/PROTOCOL.md §7), least recently paused first, their memory, and its paused-memory budget.
 *
 * A frozen workload cannot answer, and Docker refuses to stop, remove or exec in a paused
 * container: the runner thaws one (`thaw`) before anything that needs it alive: a relayed
 * request, the adapter probe, the workspace files commands, starting or stopping its agent,
 * scale_down and remove. The set is kept on disk (`<data-dir>/paused-workloads.json`); a
 * restarted runner asks the engine which workloads are frozen (`adopt`) and keeps those paused,
 * in the set and counted in the budget, so what it reports to the server is the engine's truth.
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

export type PausedMemory = {
  /** The paused workload's memory as the engine counts it, when it does. */
  memoryBytes?: number;
  /** Paused workloads over the budget, least recently paused first (never a running one). */
  evict: string[];
};

type Driver = Pick<EngineDriver, "pause" | "unpause" | "memoryBytes" | "isPaused">;

export class PausedWorkloads {
  readonly #driver: Driver;
  readonly #file: string | undefined;
  readonly #budget: number;
  readonly #now: () => number;
  /** containerName → when it was paused; Map order is pause order (least recent first). */
  readonly #paused = new Map<string, number>();
  /**
   * What each paused workload held when it was read: a frozen workload's memory does not change,
   * so the budget check reads each one once per pause, not all of them at every pause.
   */
  readonly #memory = new Map<string, number>();
  /** Pause and thaw of one workload, one at a time, in arrival order. */
  readonly #ops = new KeyedMutex();

  constructor(driver: Driver, options: PausedWorkloadsOptions = {}) {
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
   * Freezes the workload and returns as soon as it is frozen: its memory (an engine stats read,
   * up to a second on Docker) is read apart, by `memory`, so nothing waits on it.
   */
  async pause(containerName: string): Promise<void> {
    await this.#ops.run(containerName, async () => {
      await this.#driver.pause(containerName);
      this.#paused.delete(containerName);
      this.#memory.delete(containerName);
      this.#paused.set(containerName, this.#now());
      this.#save();
    });
  }

  /**
   * A paused workload's memory, then the budget: when the paused workloads' memory is over it,
   * the least recently paused ones are named to evict until the rest fit (the one just paused
   * last of all). A workload not paused (woken meanwhile) is not read; the budget is still checked.
   */
  async memory(containerName: string): Promise<PausedMemory> {
    const memoryBytes = this.#paused.has(containerName) ? await this.#read(containerName) : undefined;
    return { ...(memoryBytes !== undefined ? { memoryBytes } : {}), evict: await this.#overBudget() };
  }

  /** Thaws the workload when this runner froze it; true when it did. Cheap when it is not paused. */
  async thaw(containerName: string): Promise<boolean> {
    if (!this.#paused.has(containerName) && !this.#ops.busy(containerName)) return false;
    return this.#ops.run(containerName, async () => {
      if (!this.#paused.has(containerName)) return false;
      await this.#driver.unpause(containerName);
      this.#paused.delete(containerName);
      this.#memory.delete(containerName);
      this.#save();
      return true;
    });
  }

  /**
   * At the runner's start, before its first hello: which of `candidates` (the workloads it holds)
   * and of the set on disk the engine holds frozen now. Those stay frozen, in the set (in their
   * saved order, then the others) and counted in the budget; the rest leave the set. Returns the
   * frozen ones.
   */
  async adopt(candidates: Iterable<string>): Promise<string[]> {
    const saved = this.#load();
    const names = [...new Set([...saved.map((p) => p.container_name), ...candidates])];
    const when = new Map(saved.map((p) => [p.container_name, p.paused_at]));
    this.#paused.clear();
    this.#memory.clear();
    for (const name of names)
      if (await this.#driver.isPaused(name).catch(() => false)) this.#paused.set(name, when.get(name) ?? 0);
    this.#save();
    return this.list();
  }

  /**
   * Runs `work` with `containerName` thawed (an exec Docker refuses in a frozen container: a
   * restarted runner starting its agent again) and freezes it again after, when this runner holds
   * it paused; its place in the set (its pause time) is kept.
   */
  async whileThawed<T>(containerName: string, work: () => Promise<T>): Promise<T> {
    if (!this.#paused.has(containerName)) return work();
    return this.#ops.run(containerName, async () => {
      await this.#driver.unpause(containerName);
      try {
        return await work();
      } finally {
        await this.#driver.pause(containerName).catch(() => undefined); // gone meanwhile: nothing to freeze
      }
    });
  }

  async #read(containerName: string): Promise<number | undefined> {
    const known = this.#memory.get(containerName);
    if (known !== undefined) return known;
    const bytes = await this.#driver.memoryBytes(containerName).catch(() => undefined);
    // Kept only while it is still the same pause (not woken or paused again meanwhile).
    if (bytes !== undefined && this.#paused.has(containerName)) this.#memory.set(containerName, bytes);
    return bytes;
  }

  async #overBudget(): Promise<string[]> {
    if (this.#budget <= 0) return [];
    const sized: { name: string; bytes: number }[] = [];
    for (const name of [...this.#paused.keys()]) sized.push({ name, bytes: (await this.#read(name)) ?? 0 });
    let total = sized.reduce((sum, s) => sum + s.bytes, 0);
    const evict: string[] = [];
    for (const s of sized) {
      if (total <= this.#budget) break;
      evict.push(s.name);
      total -= s.bytes;
    }
    return evict;
  }

  #load(): { container_name: string; paused_at: number }[] {
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
    return parsed.data.paused;
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
