// RATE_LIMIT_DASHBOARD_HINTS as an operator uses it, in headless Chromium against the real Worker
// (dashboard-stack.ts): two clients run into their limits, one by API key, one by IP; the page lists each with
// a masked hint (`mal…`, `203.0.113.x`) beside its hash, on the server-rendered page and after a refresh.
// The raw key and IP are nowhere: not in Redis (every key and value under the prefix), not in the page's
// HTML or dashboard.json, not in a line the Worker logged.
// FLOODGATE_SCREENSHOTS=1 also writes docs/dashboard-hints.png (the two cards, 1280 wide).
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DashboardStack, startDashboardStack } from "./dashboard-stack";

const RULES = [
  {
    name: "api",
    match: { path: "/api/*" },
    key: "header:x-api-key",
    algorithm: "gcra",
    limit: 2,
    period: "1h",
  },
  {
    name: "per-ip",
    match: { path: "/open/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 2,
    period: "1h",
  },
];
const API_KEY = "mallory-live-7Qx9sKz2";
const CLIENT_IP = "203.0.113.77";

/** Every key under the stack's prefix and everything it holds, as one text. */
async function everythingStored(stack: DashboardStack): Promise<string> {
  const keys = await stack.redis.keys("*");
  const parts: string[] = [];
  for (const key of keys) {
    const type = await stack.redis.type(key);
    if (type === "string") parts.push(key, String(await stack.redis.get(key)));
    else if (type === "hash") parts.push(key, JSON.stringify(await stack.redis.hgetall(key)));
    else if (type === "zset")
      parts.push(key, JSON.stringify(await stack.redis.zrange(key, 0, -1, "WITHSCORES")));
    else if (type === "set") parts.push(key, JSON.stringify(await stack.redis.smembers(key)));
    else if (type === "list") parts.push(key, JSON.stringify(await stack.redis.lrange(key, 0, -1)));
    else parts.push(key);
  }
  return parts.join("\n");
}

describe("masked hints beside the identities the dashboard lists", () => {
  let stack: DashboardStack;
  beforeAll(async () => {
    stack = await startDashboardStack(RULES, { RATE_LIMIT_DASHBOARD_HINTS: "on" });
  }, 600_000);
  afterAll(() => stack?.close());

  it("show mal… and 203.0.113.x next to the hashes, and the raw key and IP are nowhere", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push(await stack.proxied("/api/items", { "x-api-key": API_KEY }));
    for (let i = 0; i < 3; i++)
      statuses.push(await stack.proxied("/open/page", { "CF-Connecting-IP": CLIENT_IP }));
    expect(statuses).toEqual([200, 200, 429, 200, 200, 429]);

    const { page, card } = await stack.openDashboard();
    const denied = (rule: string) => card(rule).locator('[data-list="topDenied"] li');
    // The isolate flushes within 5 s and the page refreshes; the hint is then beside the hash.
    await expect
      .poll(() => denied("api").first().locator("[data-hint]").textContent(), { timeout: 30_000 })
      .toBe("mal…");
    expect(await denied("api").first().locator("[data-identity]").textContent()).toMatch(/^hash:/);
    await expect
      .poll(() => denied("per-ip").first().locator("[data-hint]").textContent(), { timeout: 30_000 })
      .toBe("203.0.113.x");
    if (process.env.FLOODGATE_SCREENSHOTS) {
      await page.locator("main").screenshot({
        path: fileURLToPath(new URL("../../docs/dashboard-hints.png", import.meta.url)),
      });
    }
    // The first HTML the server renders carries them too.
    const rendered = await (await page.request.get(page.url())).text();
    expect(rendered).toContain("mal…");
    expect(rendered).toContain("203.0.113.x");

    const json = await (await page.request.get(new URL("dashboard.json", page.url()).href)).text();
    for (const where of [
      rendered,
      json,
      await page.content(),
      await everythingStored(stack),
      stack.worker.logs.join("\n"),
    ]) {
      expect(where).not.toContain(API_KEY);
      expect(where).not.toContain(API_KEY.slice(0, 8));
      expect(where).not.toContain(CLIENT_IP);
    }
  });
});
