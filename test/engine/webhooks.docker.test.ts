/** Webhooks on Docker (webhooks-scenarios.ts). */
import { webhookScenarios } from "./webhooks-scenarios.ts";

webhookScenarios({ engine: "docker" });
