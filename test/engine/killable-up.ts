/**
 * Child process of the lock-recovery test: runs StackManager.up for one session and prints
 * `PROGRESS <json>` on the first resource event the engine streams, then keeps going until the
 * parent kills it (SIGKILL of the whole process group, Pulumi CLI included) mid-update.
 *
 *   node test/engine/killable-up.ts '<json: {dataDir, spec, secrets}>'
 */
import type { SessionSpecInput } from "../../contracts/session-spec.ts";
import type { SessionSecrets } from "../../stacks/index.ts";
import { stackManagerFor } from "../support/session-harness.ts";

const { dataDir, spec, secrets } = JSON.parse(process.argv[2] ?? "{}") as {
  dataDir: string;
  spec: SessionSpecInput;
  secrets: SessionSecrets;
};
const { manager } = await stackManagerFor(dataDir);
let told = false;
await manager.up(spec, secrets, {
  onProgress: (event) => {
    if (told || event.kind !== "resource") return;
    told = true;
    process.stdout.write(`PROGRESS ${JSON.stringify(event)}\n`);
  },
});
process.stdout.write("DONE\n");
