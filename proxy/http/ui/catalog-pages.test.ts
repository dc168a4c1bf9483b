import { describe, expect, it } from "vitest";
import { WebhookEvent } from "../../../contracts/webhook.ts";
import { WEBHOOK_EVENTS } from "./catalog-pages.ts";

describe("the UI's Webhooks page", () => {
  it("offers exactly the events the API takes (kept as plain values: no zod in the page)", () => {
    expect([...WEBHOOK_EVENTS]).toEqual(WebhookEvent.options);
  });
});
