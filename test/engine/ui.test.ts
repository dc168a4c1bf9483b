/**
 * The web UI in real headless Chromium (Debian's `chromium`, driven by playwright-core with the
 * flags the machine docs list) against a real system: `serve --no-runner`, a `runner`, real
 * dockerd and Pulumi, the reference image talking to the loopback model server. Everything is
 * done through the page: paste the token, create a session (its workspace a checkout of the test
 * bed's fixture repository), watch it become Ready without a reload, chat with a streamed reply
 * (markdown rendered safely, Shift+Enter lines, Cancel), browse its workspace and see a change's
 * diff, a pi session's tool calls as they happen, Resume on a Failed session, the Agents page
 * (a write-only credential kept across an edit), runtimes and runners, snapshots, the namespace
 * switcher (a token of two namespaces, a token of one), a declared port previewed from its button
 * (a port token minted, the page a tiny server in the session serves shown), the layout at
 * 1400, 1000 and 390 px, stop it, delete it, and no console error in all of it. Screenshots go to
 * /tmp/ui-*.png (/tmp/ui-width-1400.png and /tmp/ui-width-390.png: the widths).
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { dockerProbe } from "../support/engine-probes.ts";
import { BRIDGE_IP, System, until, writeLogTails } from "../support/system.ts";
import { testbedHome } from "../support/testbed.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";

const NS = "/v1/namespaces/default";
const NAME = "ui-chat";
/** The fork the page makes of NAME's snapshot: the name its prompt proposes. */
const FORK = `${NAME}-fork`;
/** A pi session (tool calls) and one that fails on its binding (Resume on Failed). */
const PI = "ui-pi";
const BROKEN = "ui-broken";
/** A session with a declared port the page previews, and a session of another namespace. */
const PORTS = "ui-ports";
const WEB_PORT = 3000;
const TEAM_B = "/v1/namespaces/team-b";
const TEAM_B_SESSION = "ui-team-b";
/** A tiny web page served on a port in the session (its Node, no packages). */
const WEB_SERVER = `
const port = Number(process.argv[1]);
require("http").createServer((q, r) => {
  r.setHeader("content-type", "text/html; charset=utf-8");
  r.end("<!doctype html><title>preview</title><h1>Hello from port " + port + "</h1><p id=path>" + q.url.replace(/[<&]/g, "") + "</p>");
}).listen(port, "0.0.0.0");
`;
const CHROMIUM = "/usr/bin/chromium";
const SECRET = `sk-ui-${randomBytes(12).toString("hex")}`;
/** The test bed's git server (`scripts/testbed up git`): the session's workspace is a checkout of its fixture. */
const git = JSON.parse(readFileSync(join(testbedHome, "state", "git-server.json"), "utf8")) as {
  url: string;
  port: number;
};

let system: System;
let model: ModelServer;
let browser: BrowserContext;
let page: Page;
let profile = "";
/** What the page logged as errors (console and uncaught), with where: none is expected. */
const consoleErrors: string[] = [];
/** Phases the page showed for the session, in order, read while it was open (never reloaded). */
const phasesSeen: string[] = [];

const row = () => page.locator(`tr[data-session="${NAME}"]`);
const rowPhase = () => row().locator('[data-field="phase"]');
const shot = (name: string) => page.screenshot({ path: `/tmp/ui-${name}.png`, fullPage: true });

/** Another tab, logged in by a token handed over in the URL fragment; its console errors count too. */
async function openPage(url: string): Promise<Page> {
  const other = await browser.newPage();
  other.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(`${message.text()} (${message.location().url})`);
  });
  other.on("pageerror", (error) => consoleErrors.push(`uncaught: ${error.message}`));
  await other.goto(url);
  await other.waitForSelector("#app:not([hidden])");
  await other.waitForSelector("#live.on", { timeout: 10_000 });
  return other;
}

/** Watches the session's phase badge in the page and records every change. */
async function watchPhases(): Promise<void> {
  await page.exposeFunction("reportPhase", (phase: string) => {
    if (phasesSeen.at(-1) !== phase) phasesSeen.push(phase);
  });
  await observePhases();
}

/** Installs the page's observer of the phase badge (again after a reload). */
async function observePhases(): Promise<void> {
  // Runs in the page (a string: this file is typed for Node, not the DOM).
  await page.evaluate(`(() => {
    const look = () => {
      const badge = document.querySelector('tr[data-session="${NAME}"] [data-field="phase"]');
      if (badge && badge.textContent) window.reportPhase(badge.textContent);
    };
    new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true });
  })()`);
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: run \`scripts/testbed up chromium\` (Debian's chromium package)`,
    );
  model = await startModelServer(BRIDGE_IP, 0);
  process.env.E2E_UI_MODEL_KEY = SECRET;
  system = new System();
  await system.startServer();
  await system.startRunner();
  const manifest = modelAgent("assistant", model, { secretEnv: "E2E_UI_MODEL_KEY" });
  // The repository host must be in the Agent's egress for the workspace's checkout.
  manifest.spec.egress.push({ cidr: `${BRIDGE_IP}/32`, port: git.port });
  const agent = await system.call("PUT", `${NS}/agents/assistant`, manifest);
  expect(agent.status).toBe(201);
  profile = mkdtempSync(join(tmpdir(), "as-ui-chromium-"));
  // A fresh, empty profile (the persistent-context form is how playwright takes --user-data-dir).
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 860 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = browser.pages()[0] ?? (await browser.newPage());
  page.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(`${message.text()} (${message.location().url})`);
  });
  page.on("pageerror", (error) => consoleErrors.push(`uncaught: ${error.message}`));
  // Every confirm is accepted; a prompt takes the value the page proposes (a fork's name).
  page.on(
    "dialog",
    (dialog) => void dialog.accept(dialog.type() === "prompt" ? dialog.defaultValue() : undefined),
  );
});

afterEach((context) => {
  if (context.task.result?.state !== "fail") return;
  void page?.screenshot({ path: "/tmp/ui-failure.png", fullPage: true }).catch(() => undefined);
  writeLogTails(system);
});

afterAll(async () => {
  await browser?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  await system?.call("DELETE", `${NS}/harnesssessions/${NAME}`).catch(() => undefined);
  await system?.call("DELETE", `${NS}/harnesssessions/${FORK}`).catch(() => undefined);
  await system?.call("DELETE", `${NS}/harnesssessions/${PI}`).catch(() => undefined);
  await system?.call("DELETE", `${NS}/harnesssessions/${BROKEN}`).catch(() => undefined);
  await system?.call("DELETE", `${NS}/harnesssessions/${PORTS}`).catch(() => undefined);
  await system?.call("DELETE", `${TEAM_B}/harnesssessions/${TEAM_B_SESSION}`).catch(() => undefined);
  await system?.call("DELETE", `${NS}/webhooks/ui-hook`).catch(() => undefined);
  await system?.call("DELETE", `${NS}/sessionsnapshots/ui-snap`).catch(() => undefined);
  await system?.stop();
  await model?.close();
});

describe("web UI in headless Chromium (real system)", () => {
  it("serves the page and its module without a token, the API still needs one", async () => {
    const html = await fetch(`${system.url}/ui`);
    expect(html.status).toBe(200);
    expect(html.headers.get("content-type")).toContain("text/html");
    expect(html.headers.get("content-security-policy")).toContain("default-src 'self'");
    const js = await fetch(`${system.url}/ui/app.js`);
    expect(js.headers.get("content-type")).toContain("javascript");
    expect((await fetch(`${system.url}${NS}/harnesssessions`)).status).toBe(401);
    // The tab's icon is served (a browser asks for it by itself: a 404 is a console error).
    const icon = await fetch(`${system.url}/favicon.ico`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get("content-type")).toBe("image/svg+xml");
  });

  it("refuses a wrong token and connects with the admin token, which it never shows", async () => {
    await page.goto(`${system.url}/ui`);
    // Before a token: the page says where the token is.
    expect(await page.isVisible("#login")).toBe(true);
    expect(await page.textContent("#login")).toContain(".data/admin-token");
    await page.fill("#token", "not-the-token");
    await page.click("#token-form button");
    await expect.poll(() => page.textContent("#global-error")).toContain("refused");
    // The refused token's 401 is the one error this test provokes on purpose.
    consoleErrors.length = 0;
    await page.fill("#token", system.adminToken);
    await page.click("#token-form button");
    await page.waitForSelector("#app:not([hidden])");
    await page.waitForSelector("#live.on", { timeout: 10_000 });
    expect(await page.evaluate(() => sessionStorage.getItem("agent-sessions.token"))).toBe(system.adminToken);
    expect(await page.content()).not.toContain(system.adminToken);
    expect(await page.isHidden("#login")).toBe(true);
    // No sessions yet: the page says what to do next.
    await expect.poll(() => page.isVisible("#empty")).toBe(true);
    expect(await page.textContent("#empty")).toContain("Create one below");
    await watchPhases();
  });

  it("creates a session and shows it become Ready live", async () => {
    await page.fill('#create-form input[name="name"]', NAME);
    await page.fill('#create-form input[name="repo"]', `${git.url}/fixture.git`);
    await page.selectOption('#create-form select[name="agent"]', "assistant");
    // The runtime follows the Agent's binding.
    expect(await page.inputValue('#create-form select[name="runtime"]')).toBe("reference");
    await page.click("#create-form button");
    await row().waitFor();
    await shot("1-pending");
    await expect.poll(() => rowPhase().textContent(), { timeout: 180_000, interval: 250 }).toBe("Ready");
    expect(phasesSeen[0]).toBe("Pending");
    expect(phasesSeen.at(-1)).toBe("Ready");
    expect(await page.textContent("#sel-name")).toBe(NAME);
  });

  it("chats: the reply streams in through the proxy and the status follows live", async () => {
    await page.fill('#chat-form textarea[name="input"]', "remember kiwi-7");
    await page.click("#send");
    const reply = page.locator('#transcript .msg.assistant[data-done="true"] .text').first();
    await expect.poll(() => reply.textContent(), { timeout: 30_000 }).toBe("OK, I will remember kiwi-7.");
    const history = page.locator("#history tr").first();
    await expect.poll(() => history.locator('[data-field="outcome"]').textContent()).toBe("succeeded");
    expect(await history.locator("td").nth(3).textContent()).toBe("2/5");
    // Status fields move without a reload.
    await expect.poll(() => row().locator('[data-field="requests"]').textContent()).toBe("1");
    await expect.poll(() => page.textContent('[data-field="last outcome"]')).toBe("succeeded");
    // Counted by the model gateway from the model server's own answer, the adapter's claim apart.
    await expect.poll(() => page.textContent('[data-field="model tokens (in/out)"]')).toBe("2/5");
    await expect.poll(() => page.textContent('[data-field="counted by"]')).toBe("the model gateway");
    await expect.poll(() => page.textContent('[data-field="adapter claimed (in/out)"]')).toBe("2/5");

    // A slow reply: the page shows part of it before the end (delta by delta, not at once).
    const words = "one two three four five six seven eight nine ten";
    await page.fill('#chat-form textarea[name="input"]', `[slow] ${words}`);
    await page.click("#send");
    const streaming = page.locator('#transcript .msg.assistant[data-done="false"] .text');
    await expect
      .poll(
        async () => {
          const text = (await streaming.count()) ? await streaming.textContent() : "";
          return text && text.length > 0 && text !== `echo: ${words}` ? text : "";
        },
        { timeout: 15_000, interval: 50 },
      )
      .not.toBe("");
    const partialText = (await streaming.textContent()) ?? "";
    await shot("2-streaming");
    const last = page.locator("#transcript .msg.assistant .text").last();
    await expect.poll(() => last.textContent(), { timeout: 30_000 }).toBe(`echo: ${words}`);
    expect(`echo: ${words}`.startsWith(partialText)).toBe(true);
    expect(partialText.length).toBeLessThan(`echo: ${words}`.length);
    await expect
      .poll(() => page.locator("#history tr").first().locator('[data-field="outcome"]').textContent())
      .toBe("succeeded");
    await expect.poll(() => row().locator('[data-field="requests"]').textContent()).toBe("2");
    await expect.poll(() => page.textContent('[data-field="active"]')).toBe("0");
    await shot("3-chat");
  });

  it("renders the agent's markdown as markup, never as HTML, keeps Shift+Enter lines, and cancels a slow request", async () => {
    const input = '#chat-form textarea[name="input"]';
    // Two lines (Shift+Enter), then Enter sends: the model echoes them, markdown and an HTML tag.
    await page.fill(input, "");
    await page.type(input, "**bold** and `code`");
    await page.keyboard.press("Shift+Enter");
    await page.type(input, "<img src=x onerror=alert(1)> [site](https://example.com)");
    await page.keyboard.press("Enter");
    const reply = page.locator('#transcript .msg.assistant[data-done="true"] .text').last();
    await expect.poll(() => reply.locator("strong").count(), { timeout: 30_000 }).toBe(1);
    expect(await reply.locator("strong").textContent()).toBe("bold");
    expect(await reply.locator("code").textContent()).toBe("code");
    expect(await reply.locator("a").getAttribute("href")).toBe("https://example.com");
    expect(await reply.locator("a").getAttribute("rel")).toBe("noopener noreferrer");
    // The tag is text on the page, not an element.
    expect(await reply.locator("img").count()).toBe(0);
    expect(await reply.textContent()).toContain("<img src=x onerror=alert(1)>");
    const sent = page.locator("#transcript .msg.user .text").last();
    expect(await sent.textContent()).toBe(
      "**bold** and `code`\n<img src=x onerror=alert(1)> [site](https://example.com)",
    );

    // Cancel: a slow reply is cut short from the page; its outcome says so.
    await page.fill(input, "[slow] a b c d e f g h i j k l m n o p q r s t u v w x y z");
    await page.click("#send");
    await page.waitForSelector("#cancel:not([hidden])");
    expect(await page.isDisabled("#send")).toBe(true);
    await page.waitForSelector('#transcript .msg.assistant[data-done="false"]');
    await page.click("#cancel");
    await expect
      .poll(() => page.locator("#history tr").first().locator('[data-field="outcome"]').textContent(), {
        timeout: 30_000,
      })
      .toBe("cancelled");
    await page.waitForSelector("#cancel[hidden]", { state: "attached" });
    expect(await page.isEnabled("#send")).toBe(true);
    await expect.poll(() => page.textContent('[data-field="active"]'), { timeout: 10_000 }).toBe("0");
  });

  it("shows the session's events as they come and its logs", async () => {
    // The requests above finished while the page was open: their events are in the pane.
    await page.waitForSelector('#sel-events li[data-event="RequestFinished"]', { timeout: 15_000 });
    expect(await page.textContent("#sel-events")).toContain("outcome=succeeded");
    await page.click("#logs-refresh");
    await expect
      .poll(() => page.textContent("#sel-logs"), { timeout: 15_000 })
      .toMatch(/(workload|agent|runner)\/(stdout|stderr): |\(no lines yet\)/);
    expect(await page.textContent("#logs-error")).toBe("");
  });

  it("keeps the transcript across a reload: the session's own record, read back from its volume", async () => {
    await page.reload();
    await page.waitForSelector("#app:not([hidden])");
    await observePhases();
    await row().locator("td.name a").click();
    const said = page.locator("#transcript .msg.user .text");
    await expect.poll(() => said.first().textContent(), { timeout: 15_000 }).toBe("remember kiwi-7");
    const answers = page.locator("#transcript .msg.assistant .text");
    expect(await answers.first().textContent()).toBe("OK, I will remember kiwi-7.");
    // The markdown reply is rendered again; the cancelled turn says so.
    expect(await page.locator("#transcript .msg.assistant strong").first().textContent()).toBe("bold");
    expect(await answers.last().textContent()).toContain("[cancelled");
    expect(await said.count()).toBe(4);
  });

  it("measures what the session's workload uses now, against its limits", async () => {
    await page.click("#metrics-refresh");
    await expect
      .poll(() => page.textContent('[data-metric="memory"]'), { timeout: 15_000 })
      .toMatch(/^\d+\.\d MiB of 512\.0 MiB$/);
    expect(await page.textContent('[data-metric="cpu (cores)"]')).toMatch(/^\d\.\d{3} of 0\.5$/);
    expect(await page.textContent("#metrics-error")).toBe("");
  });

  it("shows the workspace: the checkout's tree, a file's text, and the diff of a change made in it", async () => {
    const files = (name: string) => page.locator(`#ws-files tr[data-file="${name}"]`);
    const view = () => page.textContent("#ws-view");
    // Each step is a round trip through server, runner and a container (a diff ~1 s on a loaded
    // machine): polls get the bound the file's other engine waits have, not expect.poll's 1 s.
    const WAIT = { timeout: 30_000 };
    const newFile = `${NS}/harnesssessions/${NAME}/workspace/files/fixture/new.txt`;
    const asAdmin = (method: string, body?: string) =>
      fetch(`${system.url}${newFile}`, {
        method,
        headers: { authorization: `Bearer ${system.adminToken}` },
        ...(body !== undefined ? { body } : {}),
      });
    // A retry starts from the checkout as seeded, at /workspace (the first try may have uploaded
    // the change and left the pane in a directory).
    await asAdmin("DELETE");
    if (await page.isEnabled("#ws-up")) await page.click("#ws-up");
    await expect.poll(() => page.textContent("#ws-path"), WAIT).toBe("/workspace");
    // The session's workspace is a checkout of the fixture repository (the create form's Repository).
    await page.click("#ws-refresh");
    await files("fixture").locator("button").click();
    await expect.poll(() => page.textContent("#ws-path"), WAIT).toBe("/workspace/fixture");
    await files("README.md").waitFor();
    expect(await files("src").getAttribute("data-type")).toBe("dir");
    await files("README.md").locator("button").click();
    await expect.poll(view, WAIT).toContain("# fixture");
    await page.click("#ws-diff-button");
    await expect.poll(view, WAIT).toBe("(no changes)");
    // A change lands in the workspace (an upload through the files API, as a tool would write it).
    expect((await asAdmin("PUT", "brand new\n")).status).toBe(201);
    await page.click("#ws-refresh");
    await files("new.txt").waitFor();
    await page.click("#ws-diff-button");
    await expect.poll(view, WAIT).toContain("diff --git a/new.txt b/new.txt");
    expect(await view()).toContain("+brand new");
    expect(await page.textContent("#ws-error")).toBe("");
    await shot("3c-workspace");
  });

  it("shows a pi session's tool calls as they happen, and the file the tool wrote without a click", async () => {
    const pi = await system.call(
      "PUT",
      `${NS}/agents/pi-assistant`,
      modelAgent("pi-assistant", model, { runtimeRef: "pi", secretEnv: "E2E_UI_MODEL_KEY" }),
    );
    expect([200, 201]).toContain(pi.status);
    const created = await system.call("PUT", `${NS}/harnesssessions/${PI}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: PI },
      spec: { agentRef: "pi-assistant", runtimeRef: "pi" },
    });
    expect([200, 201]).toContain(created.status);
    const piRow = page.locator(`tr[data-session="${PI}"]`);
    await expect
      .poll(() => piRow.locator('[data-field="phase"]').textContent(), { timeout: 180_000, interval: 250 })
      .toBe("Ready");
    await piRow.locator("td.name a").click();
    await expect.poll(() => page.textContent("#sel-name")).toBe(PI);
    await page.fill(
      '#chat-form textarea[name="input"]',
      "write file notes.txt with content hello from the ui",
    );
    await page.click("#send");
    const tool = page.locator('#transcript .msg.assistant .tool[data-tool="write"]').last();
    await expect.poll(() => tool.getAttribute("data-done"), { timeout: 60_000 }).toBe("true");
    expect(await tool.textContent()).toBe("⚙ write");
    await expect
      .poll(() => page.locator("#history tr").first().locator('[data-field="outcome"]').textContent(), {
        timeout: 60_000,
      })
      .toBe("succeeded");
    // The pane lists what the tool wrote without a click (it is listed again after each request).
    await page.waitForSelector('#ws-files tr[data-file="notes.txt"]', { timeout: 15_000 });
    await shot("3d-tool-calls");
  });

  it("offers Resume on a Failed session, and selecting it shows none of the other session's files", async () => {
    const failed = await system.call("PUT", `${NS}/harnesssessions/${BROKEN}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: BROKEN },
      spec: { agentRef: "no-such-agent", runtimeRef: "reference" },
    });
    expect([200, 201]).toContain(failed.status);
    const brokenRow = page.locator(`tr[data-session="${BROKEN}"]`);
    await expect
      .poll(() => brokenRow.locator('[data-field="phase"]').textContent(), { timeout: 60_000, interval: 250 })
      .toBe("Failed");
    expect(await brokenRow.locator("button", { hasText: "Resume" }).count()).toBe(1);
    // The pi session's workspace is on screen; selecting the Failed one clears it.
    expect(await page.locator("#ws-files tr").count()).toBeGreaterThan(0);
    await brokenRow.locator("td.name a").click();
    await expect.poll(() => page.textContent("#sel-name")).toBe(BROKEN);
    expect(await page.locator("#ws-files tr").count()).toBe(0);
    expect(await page.textContent("#ws-note")).toContain("Failed: resume it");
    expect(await page.textContent("#ws-error")).toBe("");
    // Resume makes a new generation: the controller tries again (and fails again: no such Agent).
    const before = (await system.call("GET", `${NS}/harnesssessions/${BROKEN}`)).body.metadata.generation;
    await brokenRow.locator("button", { hasText: "Resume" }).click();
    await expect
      .poll(
        async () => (await system.call("GET", `${NS}/harnesssessions/${BROKEN}`)).body.metadata.generation,
        {
          timeout: 10_000,
        },
      )
      .toBeGreaterThan(before);
    await row().locator("td.name a").click();
  });

  it("lists Agents, creates one with a write-only credential and edits it keeping the value; lists runtimes and runners", async () => {
    const secret = `sk-agent-${randomBytes(8).toString("hex")}`;
    await page.click('nav a[data-page="agents"]');
    await page.waitForSelector("#page-agents:not([hidden])");
    expect(await page.isHidden("#app")).toBe(true);
    const assistant = page.locator('#agents tr[data-agent="assistant"]');
    await expect
      .poll(() => assistant.locator('[data-field="credentials"]').textContent())
      .toBe("MODEL_API_KEY (from $E2E_UI_MODEL_KEY)");
    await system.call("DELETE", `${NS}/agents/ui-agent`); // a retry's
    await page.click("#agents-new");
    await page.fill('#agent-form input[name="name"]', "ui-agent");
    await page.selectOption('#agent-form select[name="runtime"]', "reference");
    await page.fill('#agent-form input[name="baseUrl"]', model.url);
    await page.fill('#agent-form input[name="model"]', "tiny");
    await page.fill('#agent-form textarea[name="egress"]', `${BRIDGE_IP}/32:${model.port}`);
    await page.fill('#agent-credentials input[name="cred-name"]', "MODEL_API_KEY");
    await page.fill('#agent-credentials input[name="cred-value"]', secret);
    await page.click('#agent-form button[type="submit"]');
    const made = page.locator('#agents tr[data-agent="ui-agent"]');
    await expect
      .poll(() => made.locator('[data-field="credentials"]').textContent(), { timeout: 10_000 })
      .toBe("MODEL_API_KEY (set)");
    expect(await page.textContent("#agent-form-error")).toBe("");
    const stored = await system.call("GET", `${NS}/agents/ui-agent`);
    expect(stored.body.spec.credentials).toEqual([{ name: "MODEL_API_KEY", valueSet: true }]);
    expect(JSON.stringify(stored.body)).not.toContain(secret);
    // Edit: another model name; the credential's value is left empty, so the stored one is kept.
    await made.locator("button", { hasText: "Edit" }).click();
    expect(await page.inputValue('#agent-credentials input[name="cred-value"]')).toBe("");
    await page.fill('#agent-form input[name="model"]', "tiny-2");
    await page.click('#agent-form button[type="submit"]');
    await expect
      .poll(async () => (await system.call("GET", `${NS}/agents/ui-agent`)).body.spec.model.name, {
        timeout: 10_000,
      })
      .toBe("tiny-2");
    expect((await system.call("GET", `${NS}/agents/ui-agent`)).body.spec.credentials).toEqual([
      { name: "MODEL_API_KEY", valueSet: true },
    ]);
    expect(await page.content()).not.toContain(secret);
    await shot("9-agents");

    await page.click('nav a[data-page="runtimes"]');
    const reference = page.locator('#runtimes tr[data-runtime="reference"]');
    await expect.poll(() => reference.locator('[data-field="approved"]').textContent()).toBe("approved");
    await page.click('nav a[data-page="runners"]');
    const runner = page.locator("#runners tr[data-runner]").first();
    await expect.poll(() => runner.locator('[data-field="state"]').textContent()).toBe("attached");
    await shot("10-runners");
    await page.click('nav a[data-page="sessions"]');
    await page.waitForSelector("#app:not([hidden])");
  });

  it("creates a webhook from its page: the generated secret shown once, the row listed", async () => {
    await system.call("DELETE", `${NS}/webhooks/ui-hook`); // a retry's
    await page.click('nav a[data-page="webhooks"]');
    await page.waitForSelector("#page-webhooks:not([hidden])");
    await page.click("#webhooks-new");
    await page.fill('#webhook-form input[name="name"]', "ui-hook");
    // A receiver on the test bed's bridge (nothing listens: its deliveries fail and are retried).
    await page.fill('#webhook-form input[name="url"]', `http://${BRIDGE_IP}:9/hooks`);
    await page.click('#webhook-form button[type="submit"]');
    await page.waitForSelector("#webhook-secret:not([hidden])");
    expect(await page.textContent("#webhook-secret-value")).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    const hook = page.locator('#webhooks tr[data-webhook="ui-hook"]');
    await expect.poll(() => hook.count()).toBe(1);
    expect(await hook.textContent()).toContain("ready, stopped, failed");
    // The secret is the create answer's only: GET never returns it.
    expect(JSON.stringify((await system.call("GET", `${NS}/webhooks/ui-hook`)).body)).not.toContain("whsec_");
    await hook.locator("button", { hasText: "Deliveries" }).click();
    await page.waitForSelector("#deliveries-pane:not([hidden])");
    await shot("11-webhooks");
    await page.click('nav a[data-page="sessions"]');
    await page.waitForSelector("#app:not([hidden])");
  });

  it("logs in with a session-scoped token: chats with its session and cannot list or touch another", async () => {
    const minted = await system.call("POST", "/v1/tokens", {
      name: "ui-chat-browser",
      scopes: [`session:default/${NAME}:chat`],
    });
    expect(minted.status).toBe(201);
    const chatToken = (minted.body as { token: string }).token;
    // A portal backend hands the browser the token in the URL fragment (never sent to a server).
    const chatPage = await browser.newPage();
    try {
      await chatPage.goto(`${system.url}/ui/#token=${chatToken}`);
      await chatPage.waitForSelector("#app:not([hidden])");
      await chatPage.waitForSelector("#live.on", { timeout: 10_000 });
      expect(chatPage.url()).not.toContain(chatToken);
      await expect.poll(() => chatPage.locator("tr[data-session]").count()).toBe(1);
      expect(await chatPage.locator(`tr[data-session="${NAME}"] button`).count()).toBe(0);
      expect(await chatPage.isHidden("#create")).toBe(true);
      await chatPage.fill('#chat-form textarea[name="input"]', "remember plum-3");
      await chatPage.click("#send");
      const reply = chatPage.locator('#transcript .msg.assistant[data-done="true"] .text').first();
      await expect.poll(() => reply.textContent(), { timeout: 30_000 }).toBe("OK, I will remember plum-3.");
      // Its own session's workspace is open to it.
      await chatPage.waitForSelector('#ws-files tr[data-file="fixture"]');
      await chatPage.screenshot({ path: "/tmp/ui-3b-session-token.png", fullPage: true });
    } finally {
      await chatPage.close();
    }
    const asChat = (method: string, path: string, body?: unknown) =>
      fetch(`${system.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${chatToken}`, "content-type": "application/json" },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    expect((await asChat("GET", `${NS}/harnesssessions`)).status).toBe(403);
    expect((await asChat("GET", `${NS}/harnesssessions/another`)).status).toBe(403);
    expect((await asChat("POST", `${NS}/harnesssessions/another/requests`, { input: "hi" })).status).toBe(
      403,
    );
    expect(
      (await asChat("PATCH", `${NS}/harnesssessions/${NAME}`, { spec: { desiredState: "stopped" } })).status,
    ).toBe(403);
  });

  it("switches namespaces with a token of two, each showing its own sessions; a token of one has no switcher", async () => {
    // A session of team-b (stopped: nothing runs; listing it is all this needs).
    const other = await system.call("PUT", `${TEAM_B}/harnesssessions/${TEAM_B_SESSION}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: TEAM_B_SESSION },
      spec: { agentRef: "assistant", runtimeRef: "reference", desiredState: "stopped" },
    });
    expect([200, 201], JSON.stringify(other.body)).toContain(other.status);
    const token = async (name: string, scopes: string[]) => {
      const minted = await system.call("POST", "/v1/tokens", { name, scopes });
      expect(minted.status, JSON.stringify(minted.body)).toBe(201);
      return (minted.body as { token: string }).token;
    };
    const both = await token("ui-two-namespaces", ["namespace:default:view", "namespace:team-b:view"]);
    const teamB = await token("ui-one-namespace", ["namespace:team-b:view"]);
    const rowIn = (p: Page, name: string) => p.locator(`tr[data-session="${name}"]`);

    const twoPage = await openPage(`${system.url}/ui/#token=${both}`);
    try {
      expect(await twoPage.isVisible("#namespace-select")).toBe(true);
      expect(await twoPage.locator("#namespace-select option").allTextContents()).toEqual([
        "default",
        "team-b",
      ]);
      expect(await twoPage.inputValue("#namespace-select")).toBe("default");
      await rowIn(twoPage, NAME).waitFor();
      expect(await rowIn(twoPage, TEAM_B_SESSION).count()).toBe(0);
      // A view token: no create form, no row actions.
      expect(await twoPage.isHidden("#create")).toBe(true);
      await twoPage.selectOption("#namespace-select", "team-b");
      await rowIn(twoPage, TEAM_B_SESSION).waitFor();
      expect(await rowIn(twoPage, NAME).count()).toBe(0);
      expect(
        await twoPage.textContent(`tr[data-session="${TEAM_B_SESSION}"] [data-field="phase"]`),
      ).toBeTruthy();
      await twoPage.screenshot({ path: "/tmp/ui-12-namespace-switched.png", fullPage: true });
      await twoPage.selectOption("#namespace-select", "default");
      await rowIn(twoPage, NAME).waitFor();
      expect(await rowIn(twoPage, TEAM_B_SESSION).count()).toBe(0);
    } finally {
      await twoPage.close();
    }

    const onePage = await openPage(`${system.url}/ui/#token=${teamB}`);
    try {
      await rowIn(onePage, TEAM_B_SESSION).waitFor();
      expect(await onePage.isHidden("#namespace-select")).toBe(true);
      expect(await onePage.isHidden("#namespace-input")).toBe(true);
      expect(await onePage.textContent("#namespace")).toBe("team-b");
      expect(await rowIn(onePage, NAME).count()).toBe(0);
    } finally {
      await onePage.close();
    }
  });

  it("pauses the session and shows the paused tier, then wakes it", async () => {
    await row().locator("button", { hasText: "Pause" }).click();
    await expect.poll(() => rowPhase().textContent(), { timeout: 60_000, interval: 250 }).toBe("Paused");
    await expect
      .poll(() => row().locator("[data-field=tier]").textContent(), { timeout: 10_000, interval: 250 })
      .toMatch(/^paused since /);
    expect(await row().locator("button", { hasText: "Wake" }).count()).toBe(1);
    await shot("3b-paused");
    await row().locator("button", { hasText: "Wake" }).click();
    await expect.poll(() => rowPhase().textContent(), { timeout: 60_000, interval: 250 }).toBe("Ready");
    expect(await row().locator("[data-field=tier]").textContent()).toBe("running");
    expect(await row().locator("button", { hasText: "Pause" }).count()).toBe(1);
  });

  it("takes a snapshot, forks it into a new session and restores the session to it, from the page", async () => {
    const snapRow = () => page.locator('#snapshots tr[data-snapshot="ui-snap"]');
    // A retry starts clean: the first try's fork and snapshot go.
    await system.call("DELETE", `${NS}/harnesssessions/${FORK}`);
    await system.call("DELETE", `${NS}/sessionsnapshots/ui-snap`);
    await page.fill('#snapshot-form input[name="name"]', "ui-snap");
    await page.click("#snapshot-form button");
    await expect
      .poll(() => snapRow().locator('[data-field="phase"]').textContent(), { timeout: 60_000, interval: 250 })
      .toBe("Ready");
    expect(await page.textContent("#snapshot-error")).toBe("");
    await shot("6-snapshot");
    // A file written after the snapshot, which the restore drops.
    const after = `${NS}/harnesssessions/${NAME}/workspace/files/after.txt`;
    const asAdmin = (method: string, body?: string) =>
      fetch(`${system.url}${after}`, {
        method,
        headers: { authorization: `Bearer ${system.adminToken}` },
        ...(body !== undefined ? { body } : {}),
      });
    expect((await asAdmin("PUT", "after\n")).status).toBe(201);

    // Fork: the page asks for the new session's name; the page's dialogs are accepted as they come
    // (beforeAll), so this one takes the name it proposes, `<session>-fork`.
    await snapRow().locator("button", { hasText: "Fork" }).click();
    const forkRow = page.locator(`tr[data-session="${FORK}"]`);
    await expect
      .poll(() => forkRow.locator('[data-field="phase"]').textContent(), { timeout: 180_000, interval: 250 })
      .toBe("Ready");
    const fork = await system.call("GET", `${NS}/harnesssessions/${FORK}`);
    expect(fork.body.spec.source).toEqual({ snapshotRef: "ui-snap" });
    // The fork has what the snapshot held, not what came after it.
    const forkFile = await fetch(`${system.url}${NS}/harnesssessions/${FORK}/workspace/files/after.txt`, {
      headers: { authorization: `Bearer ${system.adminToken}` },
    });
    expect(forkFile.status).toBe(404);
    await shot("7-fork");

    // Restore: back on the original session, confirmed in the page.
    await row().locator("td.name a").click();
    await snapRow().waitFor();
    await snapRow().locator("button", { hasText: "Restore" }).click();
    await expect
      .poll(async () => (await asAdmin("GET")).status, { timeout: 180_000, interval: 500 })
      .toBe(404);
    await expect.poll(() => rowPhase().textContent(), { timeout: 180_000, interval: 250 }).toBe("Ready");
    expect(await page.textContent("#snapshot-error")).toBe("");
    await shot("8-restored");
  });

  it("fits 1400 px, 1000 px and a phone's 390 px: nothing cut off, nothing wider than the screen", async () => {
    const overflow = () =>
      page.evaluate(
        `document.documentElement.scrollWidth - document.documentElement.clientWidth`,
      ) as Promise<number>;
    /** What sticks out past the screen's right edge (the message of a failure). */
    const wide = () =>
      page.evaluate(`[...document.querySelectorAll("body *")]
        .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1 && e.offsetParent !== null)
        .slice(0, 5).map((e) => e.tagName + (e.id ? "#" + e.id : "") + "." + e.className).join(", ")`) as Promise<string>;
    for (const width of [1400, 1000, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.waitForTimeout(200); // a layout pass
      expect(await overflow(), `page overflow at ${width} px: ${await wide()}`).toBeLessThanOrEqual(0);
      const del = await row().locator("button", { hasText: "Delete" }).boundingBox();
      // The session's Delete button is on screen (at 390 px its table scrolls inside its section).
      if (width >= 1000) expect((del?.x ?? width) + (del?.width ?? 0)).toBeLessThanOrEqual(width);
      await page.screenshot({ path: `/tmp/ui-width-${width}.png`, fullPage: true });
    }
    await page.setViewportSize({ width: 1280, height: 860 });
  });

  it("previews a declared port: its button mints a port token and shows the page the session serves there", async () => {
    const put = await system.call("PUT", `${NS}/harnesssessions/${PORTS}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: PORTS },
      spec: { agentRef: "assistant", runtimeRef: "reference", ports: [{ port: WEB_PORT, name: "web" }] },
    });
    expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
    const ready = await until(
      `${PORTS} Ready`,
      async () => {
        const s = await system.call("GET", `${NS}/harnesssessions/${PORTS}`);
        return s.body.status?.phase === "Ready" ? s.body : undefined;
      },
      300_000,
    );
    // A tiny web server in the session (the reference image has Node), as long as the session runs.
    void dockerProbe()
      .exec(ready.status.containerName as string, ["node", "-e", WEB_SERVER, String(WEB_PORT)])
      .catch(() => undefined);
    const portUrl = `${system.url}${NS}/harnesssessions/${PORTS}/ports/${WEB_PORT}/`;
    await until(
      "the session's page answers through the proxy",
      async () => {
        const r = await fetch(portUrl, { headers: { authorization: `Bearer ${system.adminToken}` } });
        return r.status === 200 ? true : undefined;
      },
      60_000,
    );
    const ports = page.locator(`tr[data-session="${PORTS}"]`);
    await ports.waitFor();
    await ports.locator("td.name a").click();
    await expect.poll(() => page.textContent("#sel-name")).toBe(PORTS);
    expect(await page.textContent("#sel-ports")).toContain(`web (${WEB_PORT})`);
    await page.locator("#sel-ports button", { hasText: "Preview" }).click();
    const preview = page.frameLocator("#sel-ports iframe.preview");
    await expect
      .poll(() => preview.locator("h1").textContent(), { timeout: 30_000 })
      .toBe(`Hello from port ${WEB_PORT}`);
    expect(await preview.locator("#path").textContent()).toBe("/");
    // The page runs nothing and reaches nothing of the UI's: a sandboxed frame.
    expect(await page.locator("#sel-ports iframe.preview").getAttribute("sandbox")).toBe("");
    // The port's URL and its token, for a portal or curl, shown once.
    const shown = (await page.textContent("#sel-ports")) ?? "";
    expect(shown).toContain(`/harnesssessions/${PORTS}/ports/${WEB_PORT}/`);
    expect(shown).not.toContain(system.adminToken);
    expect(await page.textContent("#ports-error")).toBe("");
    await shot("13-port-preview");
    const gone = await system.call("DELETE", `${NS}/harnesssessions/${PORTS}`);
    expect(gone.status).toBeLessThan(300);
  });

  it("stops the session and shows Stopped, then deletes it", async () => {
    await row().locator("button", { hasText: "Stop" }).click();
    await expect.poll(() => rowPhase().textContent(), { timeout: 120_000, interval: 250 }).toBe("Stopped");
    expect(await row().locator("button", { hasText: "Resume" }).count()).toBe(1);
    await shot("4-stopped");
    expect(phasesSeen).toContain("Stopped");
    await row().locator("button", { hasText: "Delete" }).click();
    await expect.poll(() => row().count(), { timeout: 180_000, interval: 250 }).toBe(0);
    expect((await system.call("GET", `${NS}/harnesssessions/${NAME}`)).status).toBe(404);
    await shot("5-deleted");
  });

  it("logged no console error in any of the flows above", () => {
    expect(consoleErrors).toEqual([]);
  });
});
