/**
 * An openai-chat runtime as a session on the test bed's Kubernetes cluster
 * (openai-chat-runtime-scenarios.ts): the fixture harness's image in a session pod, created,
 * asked, streamed, stopped and resumed with its conversation, deleted.
 */
import { applyTestbedEnv } from "../support/testbed.ts";
import { openAIChatRuntimeScenarios } from "./openai-chat-runtime-scenarios.ts";

applyTestbedEnv();

openAIChatRuntimeScenarios({ engine: "kubernetes" });
