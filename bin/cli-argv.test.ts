import { describe, expect, it } from "vitest";
import { argvOf } from "./cli-argv.ts";

describe("argvOf: global flags before or after the command", () => {
  it("finds the command after global flags that take values", () => {
    expect(argvOf(["--token", "T", "-n", "dev", "get", "hs"])).toEqual({
      command: "get",
      rest: ["--token", "T", "-n", "dev", "hs"],
      help: false,
    });
  });
  it("takes --flag=value as one word and boolean flags alone", () => {
    expect(argvOf(["--server=http://x", "--quiet", "stop", "a"]).command).toBe("stop");
  });
  it("keeps the order of what follows the command", () => {
    expect(argvOf(["get", "hs", "-o", "wide"])).toEqual({
      command: "get",
      rest: ["hs", "-o", "wide"],
      help: false,
    });
  });
  it("says --help wherever it is, and no command when there is none", () => {
    expect(argvOf(["get", "--help"]).help).toBe(true);
    expect(argvOf(["--token", "T"])).toEqual({ command: undefined, rest: ["--token", "T"], help: false });
  });
  it("does not take a value of a global flag for the command", () => {
    expect(argvOf(["--namespace", "get", "describe", "hs", "x"]).command).toBe("describe");
  });
});
