// The dashboard as an operator uses it, in headless Chromium against the real Worker (dashboard-stack.ts:
// this file's own Redis, so `INFO commandstats` counts exactly what the page costs).
// - "What does the open page cost?": nothing while its tab is hidden; refreshes back off while nothing changes.
// - "Who is being limited, and why?": Look up a value or a listed identity, Reset and Override from the list;
//   capacity as a share of what a full bucket holds; switching off asks first; the audit trail says who
//   changed what, on the page and at GET /__floodgate/audit; a global switch that lapses by itself.
// - On a phone (390 × 844): the summary first, cards collapsed, targets of 44 px, inputs of 16 px.
// FLOODGATE_SCREENSHOTS=1 also writes docs/dashboard-who.png, docs/dashboard-whatif.png (1280 wide) and docs/dashboard-phone.png
// (390 wide): FLOODGATE_SCREENSHOTS=1 npx vitest run test/node/dashboard-operator.test.ts
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { type DashboardStack, setHidden, sleep, startDashboardStack } from "./dashboard-stack";

// Periods of an hour and algorithms without epoch-aligned windows: no window boundary falls inside a test.
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
    name: "bucket",
    match: { path: "/bucket/*" },
    key: "header:x-user",
    algorithm: "token-bucket",
    limit: 30,
    burst: 10,
    period: "1h",
  },
  {
    name: "window",
    match: { path: "/window/*" },
    key: "header:x-user",
    algorithm: "sliding-log",
    limit: 10,
    period: "1h",
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
const SCREENSHOTS = Boolean(process.env.FLOODGATE_SCREENSHOTS);
const docs = (name: string) => fileURLToPath(new URL(`../../docs/${name}`, import.meta.url));

let stack: DashboardStack;
beforeAll(async () => {
  stack = await startDashboardStack(RULES);
}, 600_000); // a fresh machine installs Debian's chromium first
afterAll(() => stack?.close());

describe("what the open page costs", () => {
  it("costs no Redis command while its tab is hidden, and refreshes at once when shown again", async () => {
    // The page's timers on Playwright's clock: its waits pass at once, its requests and Redis stay real.
    const { page } = await stack.openDashboard(undefined, { clock: true });
    let refreshes = 0;
    page.on("request", (request) => {
      if (request.url().endsWith("/dashboard.json")) refreshes++;
    });
    // Visible: the page refreshes on its own within its first wait (5 s).
    await page.clock.runFor(5000);
    await expect.poll(() => refreshes, { timeout: 10_000 }).toBeGreaterThan(0);
    await setHidden(page, true);
    await expect.poll(() => page.locator("#refresh").getAttribute("data-refresh")).toBe("paused");
    await sleep(1000); // a refresh already in flight lands
    const before = await stack.commandsSoFar();
    const refreshesBefore = refreshes;
    // Longer than two of the waits a visible page would use here (10 s, then 20 s), by the page's clock; then
    // a real second for a request any timer of them would have started.
    await page.clock.runFor(32_000);
    await sleep(1000);
    expect(refreshes - refreshesBefore).toBe(0);
    expect(await stack.commandsSoFar()).toBe(before);

    await setHidden(page, false);
    await expect.poll(() => refreshes, { timeout: 3000 }).toBe(refreshesBefore + 1);
    await expect.poll(stack.commandsSoFar).toBeGreaterThan(before);
  }, 60_000);

  it("waits longer between refreshes while nothing changes, and goes back to 5 s when something does", async () => {
    // The page's waits on Playwright's clock: each passes at once, and its refresh is real.
    const { page, field } = await stack.openDashboard(undefined, { clock: true });
    const wait = () => page.locator("#refresh").getAttribute("data-refresh");
    expect(await wait()).toBe("5000");
    await page.clock.runFor(5000);
    await expect.poll(wait, { timeout: 9000 }).toBe("10000");
    await page.clock.runFor(10_000);
    await expect.poll(wait, { timeout: 9000 }).toBe("20000");
    expect(await stack.proxied("/api/items", { "x-api-key": "backoff-key" })).toBe(200);
    await page.clock.runFor(20_000);
    await expect.poll(wait, { timeout: 9000 }).toBe("5000");
    expect(Number(await field("api", "last5m.allowed").textContent())).toBeGreaterThan(0);
  }, 60_000);

  it("reads a handful of commands per refresh, not a few per rule", async () => {
    const read = () => stack.admin("GET", "/dashboard.json").then((r) => r.json());
    await read(); // settled minutes are cached per isolate from here on
    await sleep(1100); // the health probe is cached for a second: count a refresh that makes its own
    const before = await stack.commandsSoFar();
    await read();
    const perRefresh = (await stack.commandsSoFar()) - before;
    console.log(`commands per refresh (${RULES.length} rules, one with traffic): ${perRefresh}`);
    // The two unsettled minutes' counts, the live modes (and the sign-out count), the health probe's two, and
    // the lists of a rule that counted something in those minutes (the test before sent a request).
    expect(perRefresh).toBeLessThanOrEqual(8);
  });
});

describe("who is being limited, and why", () => {
  it("looks up a client's value without storing it, then resets and overrides a listed identity", async () => {
    const { page, card, status } = await stack.openDashboard();
    const key = "who-key-0042";
    const hash = `hash:${await hashIdentity(key)}`;
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push(await stack.proxied("/api/items", { "x-api-key": key }));
    expect(statuses).toEqual([200, 200, 200, 429, 429]);

    // The operator sees a hash among the top denied and asks who it is and why.
    const row = card("api").locator('[data-list="topDenied"] li', { hasText: hash });
    await row.waitFor({ timeout: 15_000 });
    await row.getByRole("button", { name: "Look up" }).click();
    const panel = card("api").locator('[data-panel="lookup"]');
    await expect
      .poll(() => panel.textContent())
      .toMatch(new RegExp(`^${hash}: denied, retry in \\d+ s, 0 of 3 left`));

    // Typing a value a client sent (from a support ticket): its hash and state, and the value is gone.
    const lookup = card("api").locator('form[data-action="lookup"]');
    await lookup.locator('input[name="identity"]').fill(key);
    await lookup.getByRole("button", { name: "Look up" }).click();
    await expect.poll(status).toBe(`Looked up ${hash} under api (nothing was counted or changed).`);
    expect(await panel.textContent()).toContain(`${hash}: denied`);
    expect(await lookup.locator('input[name="identity"]').inputValue()).toBe("");
    expect(await page.content()).not.toContain(key);
    expect(await stack.proxied("/api/items", { "x-api-key": key })).toBe(429); // looking counted nothing

    // Reset from the listed row asks first; dismissed, nothing happens.
    page.once("dialog", (dialog) => dialog.dismiss());
    await row.getByRole("button", { name: "Reset" }).click();
    expect(await stack.proxied("/api/items", { "x-api-key": key })).toBe(429);
    page.once("dialog", (dialog) => dialog.accept());
    await row.getByRole("button", { name: "Reset" }).click();
    await expect.poll(status).toBe(`Reset ${hash} under api.`);
    expect(await stack.proxied("/api/items", { "x-api-key": key })).toBe(200);

    // Override from the row: the form gets the hash, the operator the limit.
    await card("api")
      .locator('[data-list="topDenied"] li', { hasText: hash })
      .getByRole("button", { name: "Override" })
      .click();
    const form = card("api").locator('form[data-action="override"]');
    expect(await form.locator('input[name="identity"]').inputValue()).toBe(hash);
    await form.locator('input[name="limit"]').fill("50");
    onTestFinished(async () => void (await stack.admin("DELETE", `/overrides/api/${hash}`)));
    await form.getByRole("button", { name: "Save override" }).click();
    await expect
      .poll(status)
      .toBe(`Override for ${hash} under api: limit 50 per the rule's period, burst 50, until deleted.`);
    expect(await stack.proxied("/api/items", { "x-api-key": key })).toBe(200);
    if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-who.png"), fullPage: true });
  }, 60_000);

  it("labels a listed identity, shows the label wherever it is listed, and lists the paths denied most", async () => {
    const { page, card, status } = await stack.openDashboard();
    const key = "label-key-7";
    const hash = `hash:${await hashIdentity(key)}`;
    for (let i = 0; i < 3; i++) await stack.proxied("/api/items", { "x-api-key": key });
    // Denied on a path that carries an id: listed as the route, the id never on the page.
    expect(await stack.proxied("/api/users/8812345/orders", { "x-api-key": key })).toBe(429);
    expect(await stack.proxied("/api/users/8812345/orders", { "x-api-key": key })).toBe(429);

    const row = card("api").locator('[data-list="topDenied"] li', { hasText: hash });
    await row.waitFor({ timeout: 15_000 });
    let asked = "";
    page.once("dialog", (dialog) => {
      asked = dialog.message();
      return dialog.accept("scraper from ticket 4411");
    });
    onTestFinished(async () => void (await stack.admin("DELETE", `/labels/api/${hash}`)));
    await row.getByRole("button", { name: "Label" }).click();
    expect(asked).toContain(`Label for ${hash} under api`);
    await expect.poll(status).toBe(`Labelled ${hash} under api: scraper from ticket 4411.`);
    for (const list of ["topDenied", "nearest"]) {
      const labelled = card("api")
        .locator(`[data-list="${list}"] li`, { hasText: hash })
        .locator("[data-label]");
      await expect.poll(() => labelled.textContent(), { timeout: 10_000 }).toBe("scraper from ticket 4411");
    }
    const paths = card("api").locator('[data-list="topPaths"] li', { hasText: "GET /api/users/:id/orders" });
    await expect.poll(() => paths.textContent(), { timeout: 10_000 }).toBe("GET /api/users/:id/orders 2");
    const html = await page.content();
    expect(html).not.toContain("8812345");
    expect(html).not.toContain(key);
    // The label is a change like any other: in the trail, by hash.
    await expect
      .poll(
        async () =>
          ((await (await stack.admin("GET", "/audit?limit=1")).json()) as { entries: unknown[] }).entries,
      )
      .toMatchObject([
        { what: `label of ${hash} under api`, before: null, after: "scraper from ticket 4411" },
      ]);
  });

  it("shows how close an identity is to the limit as a share of its bucket's burst, not of the limit", async () => {
    const { card } = await stack.openDashboard();
    // Limit 30 per hour, burst 10: one request leaves 9 of the 10 a full bucket holds.
    expect(await stack.proxied("/bucket/x", { "x-user": "bucket-user" })).toBe(200);
    const nearest = card("bucket").locator('[data-list="nearest"] li .n');
    await expect.poll(() => nearest.first().textContent(), { timeout: 15_000 }).toBe(" 90% of burst 10 left");
  });

  it("asks before switching a rule off, and the audit trail says who switched it from what to what", async () => {
    const { page, card, field, status } = await stack.openDashboard();
    onTestFinished(async () => void (await stack.admin("PUT", "/mode", { rule: "per-user", mode: null })));
    const select = card("per-user").locator('form[data-action="mode"] select');
    await select.selectOption("off");
    let asked = "";
    page.once("dialog", (dialog) => {
      asked = dialog.message();
      return dialog.dismiss();
    });
    await card("per-user").getByRole("button", { name: "Switch" }).click();
    await expect.poll(status).toBe("Rule per-user was not switched.");
    expect(asked).toBe("Switch rule per-user off? Nothing is counted or limited until it is switched back.");
    expect(await field("per-user", "mode").textContent()).toBe("on");

    page.once("dialog", (dialog) => dialog.accept());
    await card("per-user").getByRole("button", { name: "Switch" }).click();
    await expect.poll(() => field("per-user", "mode").textContent()).toBe("off");

    // The page's own trail: a session did it, from no live switch to off.
    await page.locator("#audit summary").click();
    await page.getByRole("button", { name: "Load the audit trail" }).click();
    const newest = page.locator('[data-list="audit"] li').first();
    await expect
      .poll(() => newest.textContent())
      .toMatch(/^\d\d:\d\d:\d\d session [0-9a-f]{8}: mode of rule per-user, null → "off"$/);

    // The same trail for curl, with the admin token's own changes.
    expect((await stack.admin("PUT", "/mode", { rule: "per-user", mode: null })).status).toBe(200);
    const trail = (await (await stack.admin("GET", "/audit?limit=2")).json()) as {
      entries: Array<{ who: string; what: string; before: unknown; after: unknown; at: string }>;
    };
    await expect
      .poll(async () => ((await (await stack.admin("GET", "/audit?limit=2")).json()) as typeof trail).entries)
      .toMatchObject([
        { who: "admin token", what: "mode of rule per-user", before: "off", after: null },
        {
          who: expect.stringMatching(/^session [0-9a-f]{8}$/),
          what: "mode of rule per-user",
          before: null,
          after: "off",
        },
      ]);
  });

  it("switches every rule to monitor for a while from the page, and the switch lapses by itself", async () => {
    const { page, status } = await stack.openDashboard();
    onTestFinished(async () => void (await stack.admin("PUT", "/mode", { mode: null })));
    const user = { "x-user": "global-switch-user" };
    expect(await stack.proxied("/user/me", user)).toBe(200);
    expect(await stack.proxied("/user/me", user)).toBe(429);

    const form = page.locator('form[data-action="global-mode"]');
    await form.locator('select[name="mode"]').selectOption("monitor");
    await form.locator('select[name="ttl"]').selectOption("600");
    await form.getByRole("button", { name: "Switch all" }).click();
    await expect.poll(status).toMatch(/^Live global switch: monitor until \d\d:\d\d:\d\d\.$/);
    await expect.poll(() => stack.proxied("/user/me", user), { timeout: 3000 }).toBe(200);

    // With curl, a switch of 2 seconds: the rule enforces again once it lapses, with nobody clearing it.
    expect((await stack.admin("PUT", "/mode", { mode: "monitor", ttl: 2 })).status).toBe(200);
    expect(await stack.proxied("/user/me", user)).toBe(200);
    await sleep(2000);
    await expect.poll(() => stack.proxied("/user/me", user), { timeout: 3000 }).toBe(429);
    const rules = (await (await stack.admin("GET", "/rules")).json()) as { mode: { live: unknown } };
    expect(rules.mode.live).toBeNull();
  });
});

describe("what if the limit changed", () => {
  it("shows how the rule's identities spread by peak demand, and how many a lower limit would have denied", async () => {
    const { card, status } = await stack.openDashboard();
    const send = async (user: string, n: number) => {
      const statuses = [];
      for (let i = 0; i < n; i++) statuses.push(await stack.proxied("/window/feed", { "x-user": user }));
      return statuses;
    };
    await send("light-user", 2); // 20 % of the limit of 10
    await send("medium-user", 5); // 50 %
    expect((await send("heavy-user", 11)).filter((s) => s === 429)).toHaveLength(1); // over it: denied
    // The page has read the counts (so every isolate's have been flushed) once it shows them.
    await expect
      .poll(() => card("window").locator('[data-field="last5m.denied"]').textContent(), { timeout: 15_000 })
      .toBe("1");

    const form = card("window").locator('form[data-action="whatif"]');
    await form.locator('input[name="limit"]').fill("4");
    await form.getByRole("button", { name: "What if" }).click();
    await expect.poll(status).toBe("What if for window: nothing was changed.");
    const panel = card("window").locator('[data-panel="whatif"]');
    expect(await panel.locator("p").first().textContent()).toBe(
      "3 identities in the last hour, by their peak demand (% of limit 10):",
    );
    const bands = await panel.locator(".spread li").allTextContents();
    expect(bands.filter((band) => !band.endsWith(": 0"))).toEqual([
      "20–30 %: 1",
      "50–60 %: 1",
      "over 100 %: 1",
    ]);
    expect(await panel.locator('[data-field="whatif.verdict"]').textContent()).toBe(
      "At limit 4, 2 of 3 identities would have been denied in the last hour.",
    );
    if (SCREENSHOTS) await card("window").screenshot({ path: docs("dashboard-whatif.png") });
    // Raising it past everyone's demand: nobody.
    await form.locator('input[name="limit"]').fill("20");
    await form.getByRole("button", { name: "What if" }).click();
    await expect
      .poll(() => panel.locator('[data-field="whatif.verdict"]').textContent())
      .toBe("At limit 20, 0 of 3 identities would have been denied in the last hour.");
    // Asking changed nothing: the heavy user is still denied.
    expect(await stack.proxied("/window/feed", { "x-user": "heavy-user" })).toBe(429);
  });
});

describe("on a phone", () => {
  it("shows the summary first, collapses the cards, and makes every control a 44 px target with 16 px text", async () => {
    const { page, card } = await stack.openDashboard({ width: 390, height: 844 });
    // Page-side checks as text: this file is type-checked without the DOM's types.
    const order = await page.evaluate(
      `[...document.body.querySelectorAll("#summary, #health, #rules")].map((el) => el.id)`,
    );
    expect(order).toEqual(["summary", "health", "rules"]);
    expect(await page.locator("#summary").textContent()).toMatch(/ok · \d+ denied in 5 min/);
    for (const rule of RULES)
      expect(await card(rule.name).locator("details.card").getAttribute("open")).toBeNull();

    await card("api").locator("summary").click(); // opened with a tap
    await page.locator("#audit summary").click();
    const small = await page.evaluate(`
      [...document.querySelectorAll("button, select, input, summary, a")]
        .filter((el) => el.offsetParent !== null)
        .map((el) => {
          const box = el.getBoundingClientRect();
          const font = Number.parseFloat(getComputedStyle(el).fontSize);
          return { what: el.outerHTML.slice(0, 60), width: box.width, height: box.height, font, tag: el.tagName };
        })
        .filter((c) => c.width < 44 || c.height < 44 || (["INPUT", "SELECT"].includes(c.tag) && c.font < 16))
    `);
    expect(small).toEqual([]);
    if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-phone.png"), fullPage: true });
  });
});
