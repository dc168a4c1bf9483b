/**
 * Reading container image references the way the Docker distribution reference grammar does
 * (github.com/distribution/reference: `[registry/]path[:tag][@digest]`), for the two image
 * invariants: pinned by digest, and pulled from an approved registry.
 */

/** `name@sha256:<64 lowercase hex>`; a tag before the digest is allowed and ignored by engines. */
const DIGEST_PINNED = /^[^@\s]+@sha256:[0-9a-f]{64}$/;

/** Registry host when a reference names none (the reference grammar's default domain). */
export const DEFAULT_REGISTRY = "docker.io";

/** True when `image` names exactly one manifest by its sha256 digest. */
export function isDigestPinned(image: string): boolean {
  return DIGEST_PINNED.test(image);
}

/**
 * The registry host (with port) an engine pulls `image` from. The first path component is a
 * registry only if it contains `.` or `:` or is `localhost` (distribution/reference's rule);
 * otherwise the image comes from Docker Hub.
 */
export function registryOf(image: string): string {
  const name = image.split("@", 1)[0] ?? "";
  const slash = name.indexOf("/");
  if (slash < 0) return DEFAULT_REGISTRY;
  const first = name.slice(0, slash);
  const isHost = first.includes(".") || first.includes(":") || first === "localhost";
  return isHost ? first.toLowerCase() : DEFAULT_REGISTRY;
}
