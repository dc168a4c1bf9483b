/**
 * A startup CPU boost on Docker (issue 37; like kube-startup-cpu-boost): while a session container
 * starts (a create or a resume), its CPU limit is raised (the engine's `POST /containers/{id}/update`
 * with NanoCpus, never above the engine's cores), and it goes back to the declared limit when
 * the harness's first answer is done (`done`, from the runner's first relayed request) or the
 * bound passes, whichever comes first; also when the container is paused, stopped or removed.
 * Memory never changes.
 *
 * The container is created with its declared NanoCpus (the stack records exactly its declared
 * inputs; the provider's refresh reads whether it runs, not its limits): the boost is an update of
 * the running container, nothing the stack sees. Every boosted container is kept on disk
 * (`<data-dir>/startup-boosts.json`) before it is raised: a restarted runner puts each one back
 * to its declared limit (`reset`), so a crash never leaves one boosted.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type Docker from "dockerode";
import { z } from "zod";
import { KeyedMutex } from "../../contracts/keyed-mutex.ts";
import type { DriverLog } from "../engine/fast-path.ts";

export const STARTUP_BOOSTS_FILE_NAME = "startup-boosts.json";

/** What a boost is: cores during the start (0: no boost), for at most `maxMs`. */
export type StartupBoostSettings = { cores: number; maxMs: number };

/** @default 2 cores, at most 10 s (docs/configuration.md). */
export const DEFAULT_STARTUP_BOOST: StartupBoostSettings = { cores: 2, maxMs: 10_000 };

/**
 * The NanoCpus a container of `declared` NanoCpus gets while it starts: `cores`, never above the
 * engine's `machineCores`; undefined when that is no raise (off, or declared already as much).
 * A container with no CPU limit (0) is never boosted: it has no quota to raise.
 */
export function boostedNanoCpus(declared: number, cores: number, machineCores: number): number | undefined {
  if (!(cores > 0) || !(declared > 0)) return undefined;
  const boosted = Math.round(Math.min(cores, machineCores > 0 ? machineCores : cores) * 1e9);
  return boosted > declared ? boosted : undefined;
}

const BoostsFile = z.object({
  version: z.literal(1),
  boosts: z.array(
    z.object({ container_name: z.string(), container_id: z.string(), declared_nano_cpus: z.number() }),
  ),
});
type Boost = { containerId: string; declared: number; timer: NodeJS.Timeout };

export class StartupBoosts {
  readonly #docker: Docker;
  readonly #settings: StartupBoostSettings;
  readonly #file: string | undefined;
  readonly #log: DriverLog;
  readonly #boosts = new Map<string, Boost>();
  /** Raise and lower of one container, one at a time, in arrival order. */
  readonly #ops = new KeyedMutex();
  #machineCores: Promise<number> | undefined;

  constructor(
    docker: Docker,
    settings: StartupBoostSettings,
    options: { file?: string | undefined; log?: DriverLog } = {},
  ) {
    this.#docker = docker;
    this.#settings = settings;
    this.#file = options.file;
    this.#log = options.log ?? (() => undefined);
  }

  get enabled(): boolean {
    return this.#settings.cores > 0 && this.#settings.maxMs > 0;
  }

  /** The longest a boost lasts, ms. */
  get maxMs(): number {
    return this.#settings.maxMs;
  }

  /** Whether `containerName` runs boosted now (by this process). */
  has(containerName: string): boolean {
    return this.#boosts.has(containerName);
  }

  #cores(): Promise<number> {
    this.#machineCores ??= this.#docker.info().then(
      (info: { NCPU?: number }) => info.NCPU ?? 0,
      () => 0,
    );
    return this.#machineCores;
  }

  /**
   * Raises the container's CPU for its start (created or running, of `declared` NanoCpus), kept
   * on disk first. Never fails its caller: a boost that cannot be made leaves the declared limit.
   */
  async start(containerName: string, containerId: string, declared: number): Promise<void> {
    if (!this.enabled) return;
    await this.#ops.run(containerName, () => this.#start(containerName, containerId, declared));
  }

  async #start(containerName: string, containerId: string, declared: number): Promise<void> {
    await this.#end(containerName);
    const nanoCpus = boostedNanoCpus(declared, this.#settings.cores, await this.#cores());
    if (nanoCpus === undefined) return;
    const timer = setTimeout(() => void this.end(containerName, "bound"), this.#settings.maxMs);
    timer.unref();
    this.#boosts.set(containerName, { containerId, declared, timer });
    try {
      this.#save();
      await this.#docker.getContainer(containerId).update({ NanoCpus: nanoCpus });
    } catch (error) {
      clearTimeout(timer);
      this.#boosts.delete(containerName);
      this.#save();
      this.#log("warn", "startup CPU boost not made; the container keeps its declared limit", {
        container: containerName,
        error: String((error as Error).message ?? error).slice(0, 300),
      });
    }
  }

  /**
   * Back to the declared limit (the first answer is done, the bound passed, or it is paused,
   * stopped or removed). Nothing when it is not boosted; a container gone is no error.
   */
  async end(containerName: string, why: "answered" | "bound" | "other" = "other"): Promise<void> {
    if (!this.#boosts.has(containerName) && !this.#ops.busy(containerName)) return;
    await this.#ops.run(containerName, () => this.#end(containerName, why));
  }

  async #end(containerName: string, why: "answered" | "bound" | "other" = "other"): Promise<void> {
    const boost = this.#boosts.get(containerName);
    if (!boost) return;
    clearTimeout(boost.timer);
    this.#boosts.delete(containerName);
    await this.#restore(containerName, boost.containerId, boost.declared);
    this.#save();
    if (why !== "other") this.#log("info", "startup CPU boost ended", { container: containerName, why });
  }

  /** Forgets the boost of a container that is removed (or about to be): nothing to put back. */
  forget(containerName: string): void {
    const boost = this.#boosts.get(containerName);
    if (!boost) return;
    clearTimeout(boost.timer);
    this.#boosts.delete(containerName);
    this.#save();
  }

  /**
   * A restarted runner: every container a previous process boosted (the file) is put back to its
   * declared limit, when it is still that container (its id); the file is emptied.
   */
  async reset(): Promise<string[]> {
    if (!this.#file) return [];
    let listed: z.infer<typeof BoostsFile>["boosts"];
    try {
      listed = BoostsFile.parse(JSON.parse(readFileSync(this.#file, "utf8"))).boosts;
    } catch {
      return []; // none kept (or unreadable: nothing known to reset)
    }
    const reset: string[] = [];
    for (const b of listed)
      if (await this.#restore(b.container_name, b.container_id, b.declared_nano_cpus))
        reset.push(b.container_name);
    this.#save();
    return reset;
  }

  async #restore(containerName: string, containerId: string, declared: number): Promise<boolean> {
    try {
      await this.#docker.getContainer(containerId).update({ NanoCpus: declared });
      return true;
    } catch (error) {
      const status = (error as { statusCode?: number }).statusCode;
      // Gone (404), or already stopped/being removed (409): nothing runs boosted.
      if (status !== 404 && status !== 409)
        this.#log("warn", "putting a container back to its declared CPU limit failed", {
          container: containerName,
          error: String((error as Error).message ?? error).slice(0, 300),
        });
      return false;
    }
  }

  #save(): void {
    if (!this.#file) return;
    const body: z.infer<typeof BoostsFile> = {
      version: 1,
      boosts: [...this.#boosts].map(([name, b]) => ({
        container_name: name,
        container_id: b.containerId,
        declared_nano_cpus: b.declared,
      })),
    };
    mkdirSync(dirname(this.#file), { recursive: true });
    const tmp = `${this.#file}.tmp`;
    writeFileSync(tmp, JSON.stringify(body));
    renameSync(tmp, this.#file);
  }
}
