/**
 * A session's OpenAI-compatible API on the test bed's Kubernetes cluster
 * (openai-compat-scenarios.ts): the official openai client against a session pod of each of the
 * four shipped runtimes.
 */
import { applyTestbedEnv } from "../support/testbed.ts";
import { openAICompatScenarios } from "./openai-compat-scenarios.ts";

applyTestbedEnv();

openAICompatScenarios({ engine: "kubernetes" });
