// The dashboard in a real browser: headless Chromium (Debian's package, driven by playwright-core) against
// the real Worker in Miniflare on a free port, in front of the test Redis (through the local REST server)
// and the echo origin. It signs in, watches traffic show up, switches a rule to monitor and creates an
// override from the page, and checks the next proxied requests obey both. One Worker and one sign-in for
// the file; each test opens its own tab and sends its own traffic under its own identities (or rule), so
// any one of them runs alone (-t) or in any order.
// FLOODGATE_SCREENSHOTS=1 also writes docs/dashboard-empty.png and docs/dashboard-traffic.png
// (FLOODGATE_SCREENSHOTS=1 npx vitest run test/node/dashboard-browser.test.ts).
import { fileURLToPath } from "node:url";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from "vitest";
import { freePort } from "../../redis-rest/index.mjs";
import { hashIdentity } from "../../src/engine/keys";
import { launchChromium } from "../support/chromium.mjs";
import { type MiniflareWorker, startWorker } from "../support/miniflare-worker.mjs";

const ADMIN_TOKEN = `browser-admin-${crypto.randomUUID()}`;
// Periods of an hour and algorithms without epoch-aligned windows: no window boundary can fall inside the test.
const RULES = [
  {
    name: "api",
    match: { path: "/api/*" },
    key: "header:x-api-key",
    algorithm: "gcra",
    limit: 3,
    period: "1h",
  },
  {
    name: "watch",
    match: { path: "/watch/*" },
    key: "ip",
    algorithm: "sliding-log",
    limit: 2,
    period: "1h",
    mode: "monitor",
  },
  {
    name: "per-user",
    match: { path: "/user/*" },
    key: "header:x-user",
    algorithm: "token-bucket",
    limit: 1,
    period: "1h",
  },
];
const API_KEY = "browser-api-key-4711";
const CLIENT_IP = "203.0.113.99";
const SCREENSHOTS = Boolean(process.env.FLOODGATE_SCREENSHOTS);
const docs = (name: string) => fileURLToPath(new URL(`../../docs/${name}`, import.meta.url));

let worker: MiniflareWorker;
let browser: Awaited<ReturnType<typeof launchChromium>>;

beforeAll(async () => {
  worker = await startWorker({
    port: await freePort(),
    bindings: {
      ORIGIN_URL: inject("originUrl"),
      UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
      UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      RATE_LIMIT_RULES: JSON.stringify(RULES),
      RATE_LIMIT_PREFIX: `dash${Date.now()}`,
      RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
      RATE_LIMIT_TIMEOUT_MS: "5000",
    },
  });
  browser = await launchChromium();
  // One sign-in for the file: the session cookie lives in the browser's one context, so every tab has it.
  const page = await browser.context.newPage();
  await signIn(page);
  await page.close();
}, 600_000); // a fresh machine installs Debian's chromium first

afterAll(async () => {
  await browser?.close();
  await worker?.dispose();
});

/** Signs in through the form, as a person would; resolves once the dashboard shows its rules. */
async function signIn(page: Page): Promise<void> {
  await page.goto(`${worker.url}/__floodgate/`);
  await page.locator('input[name="token"]').fill(ADMIN_TOKEN);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${worker.url}/__floodgate/`);
  await page.locator("article[data-rule]").first().waitFor();
}

/** The dashboard's elements on one page. */
function on(page: Page) {
  const card = (rule: string) => page.locator(`article[data-rule="${rule}"]`);
  const field = (rule: string, name: string) => card(rule).locator(`[data-field="${name}"]`);
  const status = () => page.locator("#status").textContent();
  return { page, card, field, status };
}

/** A new tab on the dashboard (signed in by the file's session), closed when the test ends. */
async function openDashboard() {
  const page = await browser.context.newPage();
  onTestFinished(() => page.close());
  await page.goto(`${worker.url}/__floodgate/`);
  await page.locator("article[data-rule]").first().waitFor();
  return on(page);
}

/** A proxied request as a client would send it (over real HTTP to the Worker's port). */
async function proxied(path: string, headers: Record<string, string> = {}): Promise<number> {
  const response = await fetch(`${worker.url}${path}`, {
    headers: { "CF-Connecting-IP": CLIENT_IP, ...headers },
  });
  await response.arrayBuffer();
  return response.status;
}

/** The admin API as curl would call it: a test's own setup and cleanup, not what the page does. */
async function admin(method: string, path: string, body?: unknown): Promise<void> {
  const response = await fetch(`${worker.url}/__floodgate${path}`, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  await response.arrayBuffer();
  expect(response.ok, `${method} ${path}`).toBe(true);
}

describe("the dashboard in Chromium", () => {
  it("signs in with the token and shows every rule", async () => {
    await browser.context.clearCookies(); // signed out: this test signs in through the form itself
    const page = await browser.context.newPage();
    onTestFinished(() => page.close());
    await signIn(page);
    const { field } = on(page);
    for (const rule of RULES) {
      await expect.poll(() => field(rule.name, "algorithm").textContent()).toBe(rule.algorithm);
    }
    expect(await field("watch", "mode").textContent()).toBe("monitor");
    if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-empty.png"), fullPage: true });
  });

  // The only test that sends traffic to the api and watch rules: their counts are this test's alone.
  it("shows allowed, denied and would-deny counts and the top denied identity as traffic arrives", async () => {
    const { page, card, field } = await openDashboard();
    const api = [];
    for (let i = 0; i < 5; i++) api.push(await proxied("/api/items", { "x-api-key": API_KEY }));
    expect(api).toEqual([200, 200, 200, 429, 429]);
    const watch = [];
    for (let i = 0; i < 4; i++) watch.push(await proxied("/watch/feed"));
    expect(watch).toEqual([200, 200, 200, 200]); // monitor: counted, never blocked

    // The page refreshes itself every few seconds: no reload here.
    await expect.poll(() => field("api", "last5m.denied").textContent(), { timeout: 15_000 }).toBe("2");
    expect(await field("api", "last5m.allowed").textContent()).toBe("3");
    await expect.poll(() => field("watch", "last5m.wouldDeny").textContent(), { timeout: 15_000 }).toBe("2");
    expect(await field("watch", "last5m.allowed").textContent()).toBe("2");

    const topDenied = card("api").locator('[data-list="topDenied"] li a');
    await expect.poll(() => topDenied.first().textContent()).toBe(`hash:${await hashIdentity(API_KEY)}`);
    // The chart is drawn by the page: bars for the minute that had traffic.
    expect(await card("api").locator("svg[data-chart] rect").count()).toBeGreaterThan(0);

    const html = await page.content();
    for (const secret of [ADMIN_TOKEN, inject("redisRestToken"), API_KEY, CLIENT_IP]) {
      expect(html).not.toContain(secret);
    }
    if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-traffic.png"), fullPage: true });
  });

  it("switches a rule to monitor from the page, and the next proxied request obeys it", async () => {
    const { card, field, status } = await openDashboard();
    // per-user, not api: the traffic test counts api's requests, and must not find this test's there.
    const user = { "x-user": "switched-user" };
    expect(await proxied("/user/profile", user)).toBe(200);
    expect(await proxied("/user/profile", user)).toBe(429);
    // Whatever happens below, no other test finds the rule switched.
    onTestFinished(() => admin("PUT", "/mode", { rule: "per-user", mode: null }));

    await card("per-user").locator('form[data-action="mode"] select').selectOption("monitor");
    await card("per-user").getByRole("button", { name: "Switch" }).click();
    await expect.poll(status).toBe("Rule per-user is now monitor (from live-rule).");
    await expect.poll(() => field("per-user", "mode").textContent()).toBe("monitor");
    expect(await proxied("/user/profile", user)).toBe(200);

    // Clearing the live switch from the page enforces the rule again.
    await card("per-user").locator('form[data-action="mode"] select').selectOption("clear");
    await card("per-user").getByRole("button", { name: "Switch" }).click();
    await expect.poll(() => field("per-user", "mode").textContent()).toBe("on");
    expect(await proxied("/user/profile", user)).toBe(429);
  });

  it("creates an override from the page, and it applies to the next requests", async () => {
    const { page, card, status } = await openDashboard();
    // Without an override, the rule's own limit: one request.
    expect(await proxied("/user/profile", { "x-user": "plain-user" })).toBe(200);
    expect(await proxied("/user/profile", { "x-user": "plain-user" })).toBe(429);

    const form = card("per-user").locator('form[data-action="override"]');
    await form.locator('input[name="identity"]').fill("vip-user");
    await form.locator('input[name="limit"]').fill("5");
    await form.getByRole("button", { name: "Save override" }).click();
    const hash = await hashIdentity("vip-user");
    await expect
      .poll(status)
      .toBe(
        `Override for hash:${hash} under per-user: limit 5 per the rule's period, burst 5, until deleted.`,
      );

    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push(await proxied("/user/profile", { "x-user": "vip-user" }));
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    // The raw identity typed into the form is not echoed anywhere on the page.
    await form.locator('input[name="identity"]').fill("");
    expect(await page.content()).not.toContain("vip-user");
  });

  // On the api rule: the rule the override test writes to (per-user) may hold its override, and this test
  // counts every override of its rule.
  it("lists, edits and deletes an override from the page", async () => {
    await admin("PUT", "/overrides/api/listed-user", { limit: 5 });
    const hash = await hashIdentity("listed-user");
    const { card, status } = await openDashboard();
    const form = card("api").locator('form[data-action="override"]');
    await form.getByRole("button", { name: "List overrides" }).click();
    await expect.poll(status).toBe("1 override(s) under api.");
    const listed = card("api").locator('[data-list="overrides"] button');
    expect(await listed.textContent()).toBe(`hash:${hash}: 5 per rule period, burst 5`);

    await listed.click(); // fills the form with the override, by its hash
    expect(await form.locator('input[name="identity"]').inputValue()).toBe(`hash:${hash}`);
    await form.locator('input[name="limit"]').fill("7");
    await form.locator('input[name="burst"]').fill("7");
    await form.locator('input[name="period"]').fill("1h");
    await form.getByRole("button", { name: "Save override" }).click();
    await expect
      .poll(status)
      .toBe(`Override for hash:${hash} under api: limit 7 per 1h, burst 7, until deleted.`);

    await form.getByRole("button", { name: "Delete override" }).click();
    await expect.poll(status).toBe("Override removed under api.");
    await form.getByRole("button", { name: "List overrides" }).click();
    await expect.poll(status).toBe("0 override(s) under api.");
  });

  it("resets an identity from the page", async () => {
    const { card, status } = await openDashboard();
    expect(await proxied("/user/profile", { "x-user": "blocked-user" })).toBe(200);
    expect(await proxied("/user/profile", { "x-user": "blocked-user" })).toBe(429);

    const form = card("per-user").locator('form[data-action="reset"]');
    await form.locator('input[name="identity"]').fill("blocked-user");
    await form.getByRole("button", { name: "Reset counters" }).click();
    const hash = await hashIdentity("blocked-user");
    await expect.poll(status).toBe(`Reset hash:${hash} under per-user.`);
    expect(await proxied("/user/profile", { "x-user": "blocked-user" })).toBe(200);
  });
});
