import type { z } from "zod";

/**
 * Zod's default messages are written for developers ("Invalid input", "Invalid input: expected
 * string, received undefined"); a person calling the API needs to read what to change. This says
 * the same in words ("is required", "must be a string or empty, not a number"). Messages a schema
 * sets itself (`.regex(re, "lowercase letters, digits and '-'")`) are kept as written.
 */
export function describeIssue(issue: z.core.$ZodIssue, input?: unknown): string {
  if (input !== undefined && issue.code !== "unrecognized_keys" && !present(input, issue.path))
    return "is required";
  return phrase(issue, false);
}

/** Whether the input has a value at `path` (a missing key and an explicit `undefined` alike). */
function present(input: unknown, path: readonly PropertyKey[]): boolean {
  let node = input;
  for (const key of path) {
    if (node === null || typeof node !== "object" || !Object.hasOwn(node, key)) return false;
    node = (node as Record<PropertyKey, unknown>)[key];
  }
  return node !== undefined;
}

/** `field.path` of an issue, or `(body)` for the whole input; an unknown key names the key. */
export function issueField(issue: z.core.$ZodIssue): string {
  const keys = issue.code === "unrecognized_keys" && issue.keys.length === 1 ? issue.keys : [];
  const path = [...issue.path, ...keys].map(String).join(".");
  return path || "(body)";
}

const TYPE_NAMES: Record<string, string> = {
  int: "an integer",
  number: "a number",
  string: "a string",
  boolean: "true or false",
  object: "an object",
  array: "an array",
  bigint: "an integer",
  date: "a date",
  null: "null",
};

function typeName(expected: string): string {
  return TYPE_NAMES[expected] ?? expected;
}

/** The type zod saw, from its own message ("…, received number"): never the value itself. */
function received(message: string): string | undefined {
  return /received (\w+)/.exec(message)?.[1];
}

function literal(value: unknown): string {
  return value === "" ? "empty" : JSON.stringify(value);
}

/** zod's own wording starts like this; anything else a schema wrote on purpose. */
const ZOD_DEFAULT = /^(Invalid (input|option|discriminator)|Too (small|big)|Unrecognized key)/;

function phrase(issue: z.core.$ZodIssue, inUnion: boolean): string {
  if (!ZOD_DEFAULT.test(issue.message)) return issue.message;
  switch (issue.code) {
    case "invalid_type": {
      const got = received(issue.message);
      if (got === "undefined") return "is required";
      const want = `must be ${typeName(issue.expected)}`;
      return inUnion || !got ? want : `${want}, not ${typeName(got)}`;
    }
    case "invalid_value":
      return issue.values.length === 1
        ? `must be ${literal(issue.values[0])}`
        : `must be one of ${issue.values.map(literal).join(", ")}`;
    case "invalid_union": {
      if (issue.errors.length === 0) {
        const options = "options" in issue ? issue.options : undefined;
        return options?.length ? `must be one of ${options.map(literal).join(", ")}` : issue.message;
      }
      const branches = issue.errors.map((branch) => branch[0]).filter((b) => b !== undefined);
      if (branches.every((b) => b.code === "invalid_type" && received(b.message) === "undefined"))
        return "is required";
      const said = [...new Set(branches.map((b) => phrase(b, true)))];
      if (said.every((s) => s.startsWith("must be ")))
        return `must be ${said.map((s) => s.slice("must be ".length)).join(" or ")}`;
      return said.join(", or ");
    }
    case "too_small":
      return bound(issue.origin, "at least", issue.minimum, issue.inclusive !== false, issue.message);
    case "too_big":
      return bound(issue.origin, "at most", issue.maximum, issue.inclusive !== false, issue.message);
    case "unrecognized_keys":
      return issue.keys.length === 1
        ? "is not a field of this request"
        : `${issue.keys.join(", ")} are not fields of this request`;
    default:
      return issue.message;
  }
}

function bound(
  origin: string,
  word: "at least" | "at most",
  limit: number | bigint,
  inclusive: boolean,
  fallback: string,
): string {
  const n = Number(limit);
  switch (origin) {
    case "string":
      if (word === "at least" && n === 1) return "must not be empty";
      return `must be ${word} ${n} character${n === 1 ? "" : "s"} long`;
    case "array":
    case "set":
      if (word === "at least" && n === 1) return "must not be empty";
      return `must have ${word} ${n} item${n === 1 ? "" : "s"}`;
    case "number":
    case "int":
    case "bigint":
      if (inclusive) return `must be ${word} ${n}`;
      return `must be ${word === "at least" ? "greater" : "less"} than ${n}`;
    default:
      return fallback;
  }
}
