import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { OUR_POLICY_PACK } from "./options.ts";
import { EGRESS_PORTS_POLICY, policyPackConfigsFor } from "./policy-pack-config.ts";

const dir = () => mkdtempSync(join(tmpdir(), "as-policy-config-"));
const read = (path: string) =>
  JSON.parse(readFileSync(path, "utf8")) as Record<string, { forbiddenPorts?: number[] }>;

describe("the policy pack's config on every up", () => {
  it("carries the spec's forbidden egress ports (the server's real port among them), 0600", () => {
    const out = dir();
    const [file, ...rest] = policyPackConfigsFor({
      packs: [OUR_POLICY_PACK],
      configs: [],
      ourPack: OUR_POLICY_PACK,
      dir: out,
      stackName: "default--a",
      spec: { forbiddenEgressPorts: [4222, 18787] },
    });
    expect(rest).toEqual([]);
    expect(read(file ?? "")[EGRESS_PORTS_POLICY]?.forbiddenPorts).toEqual([4222, 18787]);
    expect(statSync(file ?? "").mode & 0o777).toBe(0o600);
  });

  it("keeps the operator's settings and ports, and other packs' configs in their places", () => {
    const out = dir();
    const operator = join(out, "operator.json");
    writeFileSync(
      operator,
      JSON.stringify({
        "image-from-approved-registry": { approvedRegistries: ["r.example"] },
        [EGRESS_PORTS_POLICY]: { forbiddenPorts: [9999] },
      }),
    );
    const other = join(out, "other.json");
    writeFileSync(other, "{}");
    const configs = policyPackConfigsFor({
      packs: ["/elsewhere/pack", OUR_POLICY_PACK],
      configs: [other, operator],
      ourPack: OUR_POLICY_PACK,
      dir: out,
      stackName: "default--b",
      spec: { forbiddenEgressPorts: [8787] },
    });
    expect(configs[0]).toBe(other);
    const ours = read(configs[1] ?? "");
    expect(ours[EGRESS_PORTS_POLICY]?.forbiddenPorts).toEqual([8787, 9999]);
    expect(ours["image-from-approved-registry"]).toEqual({ approvedRegistries: ["r.example"] });
  });

  it("leaves packs that are not ours alone", () => {
    expect(
      policyPackConfigsFor({
        packs: ["/elsewhere/pack"],
        configs: ["/elsewhere/c.json"],
        ourPack: OUR_POLICY_PACK,
        dir: dir(),
        stackName: "x",
        spec: { forbiddenEgressPorts: [1] },
      }),
    ).toEqual(["/elsewhere/c.json"]);
  });
});
