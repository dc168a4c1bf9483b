/**
 * A session's skills on Docker (issue 39): a named volume `<container>-skills` holding
 * `<pack>/<skill>.md`, root-owned, directories 0555 and files 0444, mounted read-only at /skills.
 * It belongs to the container (its files are the container's declared `skills` input, so the
 * stack and the policy pack see them): made fresh before each container of those inputs, and
 * removed with it. Filled through a helper container that is created, never started, from the
 * session's own image (the engine extracts an archive into a volume of a created container), so
 * nothing runs and no other image is needed.
 */
import type Docker from "dockerode";
import type { ContainerInputs } from "./schema.ts";

/** The skills volume of a session container. */
export function skillsVolumeName(containerName: string): string {
  return `${containerName}-skills`;
}

/** Where a session finds its skills (contracts/skill-pack.ts SKILLS_DIR). */
export const SKILLS_TARGET = "/skills";

function isNotFound(error: unknown): boolean {
  return (error as { statusCode?: number }).statusCode === 404;
}

/**
 * Makes the container's skills volume anew with exactly `inputs.skills`: a volume of that name
 * left by an earlier container (other skills) is removed first. The caller removed that container.
 */
export async function fillSkillsVolume(docker: Docker, inputs: ContainerInputs): Promise<void> {
  const skills = inputs.skills ?? [];
  const volume = skillsVolumeName(inputs.name);
  const helperName = `${volume}-fill`;
  await docker
    .getContainer(helperName)
    .remove({ force: true })
    .catch((e: unknown) => {
      if (!isNotFound(e)) throw e;
    });
  await removeSkillsVolume(docker, inputs.name);
  await docker.createVolume({ Name: volume, Labels: inputs.labels });
  const helper = await docker.createContainer({
    name: helperName,
    Image: inputs.image,
    Labels: inputs.labels,
    NetworkDisabled: true,
    HostConfig: {
      NetworkMode: "none",
      // NoCopy: an image's own /skills never seeds the volume. (dockerode's type wants every
      // field of VolumeOptions; the engine takes each as optional.)
      Mounts: [
        {
          Type: "volume",
          Source: volume,
          Target: SKILLS_TARGET,
          VolumeOptions: { NoCopy: true } as NonNullable<Docker.MountConfig[number]["VolumeOptions"]>,
        },
      ],
    },
  });
  try {
    await helper.putArchive(skillsArchive(skills), { path: SKILLS_TARGET });
  } finally {
    await helper.remove({ force: true, v: false });
  }
}

/** Removes a container's skills volume; none is no error. */
export async function removeSkillsVolume(docker: Docker, containerName: string): Promise<void> {
  await docker
    .getVolume(skillsVolumeName(containerName))
    .remove()
    .catch((e: unknown) => {
      if (!isNotFound(e)) throw e;
    });
}

/**
 * A ustar archive of the skill files: one directory per pack (0555), each file 0444, all owned
 * by root (0:0), so the session's user can neither write nor execute them.
 */
export function skillsArchive(files: readonly { path: string; content: string }[]): Buffer {
  const parts: Buffer[] = [];
  const dirs = [...new Set(files.map((f) => f.path.split("/")[0] ?? ""))].filter((d) => d !== "");
  for (const dir of dirs) parts.push(header(dir, "", 0o555, 0, "5"));
  for (const file of files) {
    const body = Buffer.from(file.content, "utf8");
    const slash = file.path.lastIndexOf("/");
    parts.push(
      header(file.path.slice(slash + 1), file.path.slice(0, Math.max(slash, 0)), 0o444, body.length, "0"),
    );
    parts.push(body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

/** One ustar header: `name` (≤ 100 bytes) under `prefix` (≤ 155 bytes; pack and skill are DNS labels). */
function header(name: string, prefix: string, mode: number, size: number, flag: "0" | "5"): Buffer {
  const b = Buffer.alloc(512);
  const put = (offset: number, length: number, value: string) => b.write(value, offset, length, "utf8");
  const octal = (offset: number, length: number, value: number) =>
    put(offset, length, `${value.toString(8).padStart(length - 1, "0")}\0`);
  put(0, 100, flag === "5" ? `${name}/` : name);
  octal(100, 8, mode);
  octal(108, 8, 0);
  octal(116, 8, 0);
  octal(124, 12, size);
  octal(136, 12, 0);
  b.fill(32, 148, 156);
  put(156, 1, flag);
  put(257, 6, "ustar\0");
  put(263, 2, "00");
  put(345, 155, prefix);
  let sum = 0;
  for (const x of b) sum += x;
  put(148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return b;
}
