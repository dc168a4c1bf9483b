/**
 * A session's OpenAI-compatible API on Docker (openai-compat-scenarios.ts): the official openai
 * client against a session of each of the four shipped runtimes.
 */
import { openAICompatScenarios } from "./openai-compat-scenarios.ts";

openAICompatScenarios({ engine: "docker" });
