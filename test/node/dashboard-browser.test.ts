// The dashboard in a real browser: headless Chromium (Debian's package, driven by playwright-core) against
// the real Worker in Miniflare on a free port, in front of the test Redis (through the local REST server)
// and the echo origin. It signs in, watches traffic show up, switches a rule to monitor and creates an
// override from the page, and checks the next proxied requests obey both.
// FLOODGATE_SCREENSHOTS=1 also writes docs/dashboard-empty.png and docs/dashboard-traffic.png
// (FLOODGATE_SCREENSHOTS=1 npx vitest run test/node/dashboard-browser.test.ts).
import { fileURLToPath } from "node:url";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
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
let page: Page;

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
  page = await browser.context.newPage();
}, 600_000); // a fresh machine installs Debian's chromium first

afterAll(async () => {
  await browser?.close();
  await worker?.dispose();
});

/** A proxied request as a client would send it (over real HTTP to the Worker's port). */
async function proxied(path: string, headers: Record<string, string> = {}): Promise<number> {
  const response = await fetch(`${worker.url}${path}`, {
    headers: { "CF-Connecting-IP": CLIENT_IP, ...headers },
  });
  await response.arrayBuffer();
  return response.status;
}

const card = (rule: string) => page.locator(`article[data-rule="${rule}"]`);
const field = (rule: string, name: string) => card(rule).locator(`[data-field="${name}"]`);

describe("the dashboard in Chromium", () => {
  it("signs in with the token and shows every rule", async () => {
    await page.goto(`${worker.url}/__floodgate/`);
    await page.locator('input[name="token"]').fill(ADMIN_TOKEN);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL(`${worker.url}/__floodgate/`);
    for (const rule of RULES) {
      await expect.poll(() => field(rule.name, "algorithm").textContent()).toBe(rule.algorithm);
    }
    expect(await field("watch", "mode").textContent()).toBe("monitor");
    if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-empty.png"), fullPage: true });
  });

  it("shows allowed, denied and would-deny counts and the top denied identity as traffic arrives", async () => {
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
    expect(await proxied("/api/items", { "x-api-key": API_KEY })).toBe(429);
    await card("api").locator('form[data-action="mode"] select').selectOption("monitor");
    await card("api").getByRole("button", { name: "Switch" }).click();
    await expect
      .poll(() => page.locator("#status").textContent())
      .toBe("Rule api is now monitor (from live-rule).");
    await expect.poll(() => field("api", "mode").textContent()).toBe("monitor");
    expect(await proxied("/api/items", { "x-api-key": API_KEY })).toBe(200);
  });

  it("creates an override from the page, and it applies to the next requests", async () => {
    expect(await proxied("/user/profile", { "x-user": "alice" })).toBe(200);
    expect(await proxied("/user/profile", { "x-user": "alice" })).toBe(429);

    const form = card("per-user").locator('form[data-action="override"]');
    await form.locator('input[name="identity"]').fill("vip-user");
    await form.locator('input[name="limit"]').fill("5");
    await form.getByRole("button", { name: "Save override" }).click();
    const hash = await hashIdentity("vip-user");
    await expect
      .poll(() => page.locator("#status").textContent())
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

  it("lists, edits and deletes an override from the page", async () => {
    const hash = await hashIdentity("vip-user");
    const form = card("per-user").locator('form[data-action="override"]');
    await form.getByRole("button", { name: "List overrides" }).click();
    await expect.poll(() => page.locator("#status").textContent()).toBe("1 override(s) under per-user.");
    const listed = card("per-user").locator('[data-list="overrides"] button');
    expect(await listed.textContent()).toBe(`hash:${hash}: 5 per rule period, burst 5`);

    await listed.click(); // fills the form with the override, by its hash
    expect(await form.locator('input[name="identity"]').inputValue()).toBe(`hash:${hash}`);
    await form.locator('input[name="limit"]').fill("7");
    await form.locator('input[name="burst"]').fill("7");
    await form.locator('input[name="period"]').fill("1h");
    await form.getByRole("button", { name: "Save override" }).click();
    await expect
      .poll(() => page.locator("#status").textContent())
      .toBe(`Override for hash:${hash} under per-user: limit 7 per 1h, burst 7, until deleted.`);

    await form.getByRole("button", { name: "Delete override" }).click();
    await expect.poll(() => page.locator("#status").textContent()).toBe("Override removed under per-user.");
    await form.getByRole("button", { name: "List overrides" }).click();
    await expect.poll(() => page.locator("#status").textContent()).toBe("0 override(s) under per-user.");
  });

  it("resets an identity from the page", async () => {
    const form = card("per-user").locator('form[data-action="reset"]');
    await form.locator('input[name="identity"]').fill("alice");
    await form.getByRole("button", { name: "Reset counters" }).click();
    const hash = await hashIdentity("alice");
    await expect.poll(() => page.locator("#status").textContent()).toBe(`Reset hash:${hash} under per-user.`);
    expect(await proxied("/user/profile", { "x-user": "alice" })).toBe(200);
  });
});
