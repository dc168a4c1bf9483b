import { describe, expect, it } from "vitest";
import { SessionSpec } from "../../../contracts/session-spec.ts";
import { containerEnv, containerSecretEnv, containerSpecInputs, specHash } from "./session-container.ts";
import { skillsArchive } from "./session-skills.ts";

const base = {
  namespace: "team",
  name: "chat",
  engine: "docker",
  image: `127.0.0.1:5000/agent@sha256:${"a".repeat(64)}`,
  contract: "v1alpha2",
} as const;
const skill = { pack: "tips", name: "greeting", description: "How to greet", content: "# Greeting\n" };

const hashOf = (spec: SessionSpec) =>
  specHash({
    ...containerSpecInputs(spec),
    env: containerEnv(spec, "172.30.0.1"),
    secretEnv: containerSecretEnv({}, "token"),
    secretEnvHashKey: "",
  });

describe("a Docker session's skills (issue 39)", () => {
  it("without skills the container's inputs, hence its spec hash, are what they were", () => {
    const without = SessionSpec.parse(base);
    expect(containerSpecInputs(without)).not.toHaveProperty("skills");
    expect(containerSpecInputs(without).mounts.map((m) => m.target)).toEqual(["/workspace", "/tmp"]);
    expect(hashOf(without)).not.toBe(hashOf(SessionSpec.parse({ ...base, skills: [skill] })));
  });

  it("with skills: its own volume read-only at /skills, the files with front matter", () => {
    const inputs = containerSpecInputs(SessionSpec.parse({ ...base, skills: [skill] }));
    expect(inputs.mounts).toContainEqual({
      type: "volume",
      source: "as-team-chat-skills",
      target: "/skills",
      readOnly: true,
    });
    expect(inputs.skills).toEqual([
      {
        path: "tips/greeting.md",
        content: '---\nname: greeting\ndescription: "How to greet"\n---\n\n# Greeting\n',
      },
    ]);
  });

  it("the archive: pack directories 0555 and files 0444, owned by root", () => {
    const tar = skillsArchive([{ path: "tips/greeting.md", content: "hello" }]);
    const field = (offset: number, at: number, length: number) =>
      tar
        .subarray(offset + at, offset + at + length)
        .toString("utf8")
        .replace(/\0.*$/s, "");
    expect(field(0, 0, 100)).toBe("tips/");
    expect(field(0, 100, 8)).toBe("0000555");
    expect(field(512, 0, 100)).toBe("greeting.md");
    expect(field(512, 345, 155)).toBe("tips");
    expect(field(512, 100, 8)).toBe("0000444");
    expect(field(512, 108, 8)).toBe("0000000");
    expect(tar.subarray(1024, 1029).toString()).toBe("hello");
  });
});
