// "Is it healthy?" as an operator reads it on the dashboard, in headless Chromium against the real Worker in
// front of this file's own Redis (dashboard-stack.ts), which the test takes away and brings back:
// - normal deny-cache answers are "served locally", apart from faults ("degraded");
// - during the outage the last good numbers stay on the page, greyed, with the time they were read, and
//   the isolate's own decisions (failed open) show as they happen;
// - after it, those decisions join the counts: none is lost.
// FLOODGATE_SCREENSHOTS=1 also writes docs/dashboard-outage.png (1280 wide).
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DashboardStack, startDashboardStack } from "./dashboard-stack";

const RULES = [
  {
    name: "api",
    match: { path: "/api/*" },
    key: "header:x-api-key",
    algorithm: "gcra",
    limit: 3,
    period: "1h",
  },
];
const SCREENSHOTS = Boolean(process.env.FLOODGATE_SCREENSHOTS);
const docs = (name: string) => fileURLToPath(new URL(`../../docs/${name}`, import.meta.url));

let stack: DashboardStack;
beforeAll(async () => {
  stack = await startDashboardStack(RULES);
}, 600_000);
afterAll(() => stack?.close());

describe("the dashboard through a Redis outage", () => {
  it("keeps the last good numbers greyed, counts what the isolate decides meanwhile, and merges it after", async () => {
    const { page, card, field } = await stack.openDashboard();
    const health = (name: string) => page.locator(`#health [data-field="${name}"]`);
    let sent = 0;
    const api = async (key: string) => {
      sent++;
      return stack.proxied("/api/items", { "x-api-key": key });
    };

    // Normal traffic: one client runs out; its next request is answered by the isolate's deny cache.
    const before = [];
    for (let i = 0; i < 5; i++) before.push(await api("steady-client"));
    expect(before).toEqual([200, 200, 200, 429, 429]);
    await expect.poll(() => field("api", "last5m.denied").textContent(), { timeout: 25_000 }).toBe("2");
    expect(await field("api", "last5m.allowed").textContent()).toBe("3");
    expect(await health("decisions.local").textContent()).toBe("lease 0, deny cache 1");
    expect(await health("decisions.degraded").textContent()).toBe("none"); // a cached denial is no fault

    await stack.cutRedis();
    try {
      // Fail open (the default): new clients are let through by the isolate while Redis cannot answer.
      for (let i = 0; i < 3; i++) expect(await api(`outage-client-${i}`)).toBe(200);
      await expect.poll(() => health("health.redis").textContent(), { timeout: 30_000 }).toBe("unreachable");
      // The numbers read before the outage stay, greyed, with the time they were read.
      expect(await field("api", "last5m.allowed").textContent()).toBe("3");
      expect(await card("api").locator("table.counts").getAttribute("class")).toContain("stale");
      expect(await health("freshness").textContent()).toMatch(
        /^Counts unavailable: Redis could not be read; last good \d\d:\d\d:\d\d\.$/,
      );
      await expect
        .poll(() => health("isolate").textContent(), { timeout: 30_000 })
        .toBe("3 decisions, 3 failed open, 0 failed closed");
      if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-outage.png"), fullPage: true });
    } finally {
      await stack.restoreRedis();
    }

    // Back: once a request finds Redis again (the breaker lets a probe through within 10 s), the isolate
    // writes what it kept, and the page shows every request sent, fresh again.
    await expect.poll(() => api("after-outage"), { timeout: 15_000, interval: 500 }).toBe(200);
    await expect
      .poll(async () => Number(await field("api", "last5m.allowed").textContent()), { timeout: 60_000 })
      .toBe(sent - 2); // every request but the two denials
    expect(await card("api").locator("table.counts").getAttribute("class")).not.toContain("stale");
    expect(await health("freshness").textContent()).toBe("");
    expect(await page.locator('#health [data-show="isolate"]').isHidden()).toBe(true);
    const [failedOpen] = (await health("decisions.failed").textContent())?.split(" / ") ?? [];
    expect(Number(failedOpen)).toBeGreaterThanOrEqual(3);
    expect(await health("decisions.degraded").textContent()).not.toBe("none");
  }, 150_000);
});
