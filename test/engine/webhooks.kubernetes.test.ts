/** Webhooks on Kubernetes (webhooks-scenarios.ts). */
import { webhookScenarios } from "./webhooks-scenarios.ts";

webhookScenarios({ engine: "kubernetes", suffix: "-k" });
