export { PolicyViolationError, StackError } from "./errors.ts";
export { type StackManagerOptionsInput, StackManagerOptions } from "./options.ts";
export {
  type Logger,
  type OperationOptions,
  type SessionSecrets,
  StackManager,
  type StackOperation,
  type StackProgress,
} from "./stack-manager.ts";
