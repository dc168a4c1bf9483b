/**
 * The conformance precheck of a runtime's image: does the image hold what the runtime's contract
 * declares it runs? Read from the image itself (a created, never started container on the test
 * bed's dockerd; paths looked up with the archive API), so an image that cannot even start a
 * shell is judged too:
 * - its entrypoint (the adapter): the program and every absolute path in its argv;
 * - `spec.agent.command` (the seed-004 agent), the same;
 * - capability `tools`: a shell, `/bin/sh` (bash/terminal tools run through it).
 * Returns one line per missing path, saying what needs it; empty when nothing is missing.
 */
import type Docker from "dockerode";

export type DeclaredRuntime = { capabilities: string[]; agent?: { command: string[] } | undefined };

/** What the image must hold, by absolute path, and why. */
export function requiredPaths(entrypoint: string[], runtime: DeclaredRuntime): Map<string, string> {
  const need = new Map<string, string>();
  const argv = (what: string, args: string[]) => {
    args.forEach((arg, i) => {
      if (!arg.startsWith("/") || need.has(arg)) return;
      need.set(arg, i === 0 ? `the program of ${what}` : `a file ${what} runs`);
    });
  };
  argv("its entrypoint (the adapter)", entrypoint);
  if (runtime.agent) argv("spec.agent.command", runtime.agent.command);
  if (runtime.capabilities.includes("tools") && !need.has("/bin/sh"))
    need.set("/bin/sh", "a shell, for the tools it declares");
  return need;
}

/** What `image` lacks of what `runtime` declares, one line each (see the header). */
export async function imageLacks(docker: Docker, image: string, runtime: DeclaredRuntime): Promise<string[]> {
  const info = await docker
    .getImage(image)
    .inspect()
    .catch(async (e: { statusCode?: number }) => {
      if (e.statusCode !== 404) throw e;
      await pull(docker, image);
      return docker.getImage(image).inspect();
    });
  const entrypoint = [...(info.Config.Entrypoint ?? []), ...(info.Config.Cmd ?? [])];
  if (entrypoint.length === 0) return [`image ${image} has no entrypoint or command`];
  // A created container is never started: its filesystem is only read.
  const container = await docker.createContainer({ Image: image, Entrypoint: entrypoint.slice(0, 1) });
  try {
    const missing: string[] = [];
    for (const [path, why] of requiredPaths(entrypoint, runtime)) {
      const found = await container.infoArchive({ path }).then(
        () => true,
        (e: { statusCode?: number }) => (e.statusCode === 404 ? false : Promise.reject(e)),
      );
      if (!found) missing.push(`image ${image} lacks ${path} (${why})`);
    }
    return missing;
  } finally {
    await container.remove({ force: true });
  }
}

/** Pulls an image (the test bed's local registry) and waits for the pull to finish. */
async function pull(docker: Docker, image: string): Promise<void> {
  const stream = (await docker.pull(image)) as NodeJS.ReadableStream;
  await new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(stream, (error: Error | null) => (error ? reject(error) : resolve())),
  );
}
