/** Structured logging: the one `Logger` of server, runner and stacks (contracts/log.ts). */
export { jsonLogger, type Logger, silentLogger } from "../../contracts/log.ts";
