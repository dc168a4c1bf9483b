/**
 * One engine operation per workspace at a time on this runner (provision, scale_down, remove),
 * in arrival order. The server may stop waiting for a provision (its deadline passed, its link or
 * its process went) and send `remove` for the same workspace while the provision still runs here:
 * run side by side, the remove finds nothing yet and the late provision leaves a workload running
 * with its credentials (issue 34 item 11a). In order, the remove takes down what the provision made.
 */
export class WorkspaceOperations {
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `operation` once every earlier operation on `containerName` has settled. */
  run<T>(containerName: string, operation: () => Promise<T>): Promise<T> {
    const before = this.#tails.get(containerName) ?? Promise.resolve();
    const result = before.then(operation, operation);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.#tails.set(containerName, tail);
    void tail.then(() => {
      if (this.#tails.get(containerName) === tail) this.#tails.delete(containerName);
    });
    return result;
  }
}
