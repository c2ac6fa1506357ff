// The stack the dashboard's operator tests run on: headless Chromium (Debian's package, driven by
// playwright-core) signed in to the real Worker in Miniflare, in front of the test file's own redis-server and
// REST server. Only that file's traffic reaches that Redis, so `INFO commandstats` counts exactly what the
// page costs, and a test can take the REST server away (an outage) and bring it back on the same port.
import { Redis } from "ioredis";
import type { Page } from "playwright-core";
import { inject, onTestFinished } from "vitest";
import { freePort, startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { launchChromium } from "../support/chromium.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";

export const ADMIN_TOKEN = `operator-admin-${crypto.randomUUID()}`;

export type DashboardStack = Awaited<ReturnType<typeof startDashboardStack>>;

/** Starts the stack for `rules` and signs the browser in once (every tab shares the session cookie). */
export async function startDashboardStack(rules: unknown[], bindings: Record<string, string> = {}) {
  const redis = await startRedis();
  const restPort = await freePort();
  let rest = await startRestServer({ redisUrl: redis.url, port: restPort });
  const token = rest.token;
  const client = new Redis(redis.url, { lazyConnect: true });
  const worker = await startWorker({
    port: await freePort(),
    bindings: {
      ORIGIN_URL: inject("originUrl"),
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: token,
      RATE_LIMIT_RULES: JSON.stringify(rules),
      RATE_LIMIT_PREFIX: `op${Date.now()}`,
      RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
      // Above the default 200 ms: this machine is shared and busy; an outage here refuses connections at once.
      RATE_LIMIT_TIMEOUT_MS: "2000",
      ...bindings,
    },
  });
  const browser = await launchChromium();
  const signIn = await browser.context.newPage();
  await signIn.goto(`${worker.url}/__floodgate/`);
  await signIn.locator('input[name="token"]').fill(ADMIN_TOKEN);
  await signIn.getByRole("button", { name: "Sign in" }).click();
  await signIn.locator("article[data-rule]").first().waitFor();
  await signIn.close();

  return {
    worker,
    browser,
    /** The stack's redis-server, read directly (what is stored, never through the Worker). */
    redis: client,
    /** Every command Redis has run so far (INFO's own calls left out). */
    async commandsSoFar(): Promise<number> {
      const info = await client.info("commandstats");
      let total = 0;
      for (const [, name, calls] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        if (name !== "info") total += Number(calls);
      }
      return total;
    },
    /**
     * A tab on the dashboard at this size, closed when the test ends. `clock`: the page's timers run on
     * Playwright's clock (`page.clock.runFor`), so a test of its waits need not wait them out.
     */
    async openDashboard(viewport = { width: 1280, height: 900 }, { clock = false } = {}) {
      const page = await browser.context.newPage();
      onTestFinished(() => page.close());
      if (clock) await page.clock.install();
      await page.setViewportSize(viewport);
      await page.goto(`${worker.url}/__floodgate/`);
      await page.locator("article[data-rule]").first().waitFor();
      const card = (rule: string) => page.locator(`article[data-rule="${rule}"]`);
      const field = (rule: string, name: string) => card(rule).locator(`[data-field="${name}"]`);
      const status = () => page.locator("#status").textContent();
      return { page, card, field, status };
    },
    /** A proxied request as a client sends it. */
    async proxied(path: string, headers: Record<string, string> = {}): Promise<number> {
      const response = await fetch(`${worker.url}${path}`, {
        headers: { "CF-Connecting-IP": "203.0.113.50", ...headers },
      });
      await response.arrayBuffer();
      return response.status;
    },
    /** The admin API as curl calls it. */
    admin(method: string, path: string, body?: unknown): Promise<Response> {
      return fetch(`${worker.url}/__floodgate${path}`, {
        method,
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    },
    /** Redis unreachable: the REST server stops (connections refused) until `restoreRedis`. */
    async cutRedis(): Promise<void> {
      await rest.close();
    },
    async restoreRedis(): Promise<void> {
      rest = await startRestServer({ redisUrl: redis.url, port: restPort, token });
    },
    async close(): Promise<void> {
      await browser.close();
      await worker.dispose();
      client.disconnect();
      await rest.close().catch(() => {});
      await redis.close();
    },
  };
}

/**
 * Hides or shows the tab as the Page Visibility API reports it. Headless Chromium keeps every tab
 * `visible` (it has no window to minimise or cover), so the state and its event are set as a browser sets
 * them when a tab goes to the background.
 */
export async function setHidden(page: Page, hidden: boolean): Promise<void> {
  // As text: this file is type-checked without the DOM's types.
  await page.evaluate(`(() => {
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => ${JSON.stringify(hidden ? "hidden" : "visible")} });
    Object.defineProperty(document, "hidden", { configurable: true, get: () => ${hidden} });
    document.dispatchEvent(new Event("visibilitychange"));
  })()`);
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
