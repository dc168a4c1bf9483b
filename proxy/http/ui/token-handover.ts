/**
 * Which token the page uses when a link hands one over (`/ui/#token=…`) while the tab already
 * holds one. Taking it silently let any link swap the token in use (a page then acting as someone
 * else without a word); a different one replaces it only when the user confirms.
 */
export function tokenToUse(held: string, handed: string | null, confirmReplace: () => boolean): string {
  if (!handed) return held;
  if (!held || handed === held) return handed;
  return confirmReplace() ? handed : held;
}
