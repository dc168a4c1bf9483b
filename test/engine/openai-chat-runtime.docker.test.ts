/**
 * An openai-chat runtime as a session on Docker (openai-chat-runtime-scenarios.ts): the fixture
 * harness's image, created, asked, streamed, stopped and resumed with its conversation, deleted.
 */
import { openAIChatRuntimeScenarios } from "./openai-chat-runtime-scenarios.ts";

openAIChatRuntimeScenarios({ engine: "docker" });
