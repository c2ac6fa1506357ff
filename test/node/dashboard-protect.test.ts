// The dashboard's penalty box and live lists as an operator uses them, in headless Chromium against the real
// Worker (dashboard-stack.ts): a blocking rule's card lists the identities it keeps out, hashed, with their time
// left, and lifts one with a click (asking first); a live list's panel shows its entries, adds one (for a TTL),
// removes one (asking first), each in effect at once and in the audit trail; a deny rule's refusals are counted.
// FLOODGATE_SCREENSHOTS=1 also writes docs/dashboard-protect.png (1280 wide):
// FLOODGATE_SCREENSHOTS=1 npx vitest run test/node/dashboard-protect.test.ts
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { type DashboardStack, startDashboardStack } from "./dashboard-stack";

const RULES = [
  { name: "incident", action: "deny", match: { list: "incident" } },
  {
    name: "login",
    match: { path: "/login" },
    key: "header:x-user",
    algorithm: "fixed-window",
    limit: 2,
    period: "1h",
    block: "15m",
  },
];
const SCREENSHOTS = Boolean(process.env.FLOODGATE_SCREENSHOTS);
const docs = (name: string) => fileURLToPath(new URL(`../../docs/${name}`, import.meta.url));

let stack: DashboardStack;
beforeAll(async () => {
  stack = await startDashboardStack(RULES);
}, 600_000); // a fresh machine installs Debian's chromium first
afterAll(() => stack?.close());

interface AuditEntry {
  who: string;
  what: string;
  before?: unknown;
  after?: unknown;
}
const audit = async (limit: number) =>
  ((await (await stack.admin("GET", `/audit?limit=${limit}`)).json()) as { entries: AuditEntry[] }).entries;

describe("the penalty box on the dashboard", () => {
  it("lists the identities a rule blocks, hashed, with the time left, and lifts one with a click, asking first", async () => {
    const user = "blocked-user-31";
    const hash = `hash:${await hashIdentity(user)}`;
    const login = () => stack.proxied("/login", { "x-user": user });
    expect([await login(), await login(), await login()]).toEqual([200, 200, 429]);

    const { page, card, status } = await stack.openDashboard();
    const row = card("login").locator('[data-list="blocked"] li', { hasText: hash });
    // Read when the page opens: 15 minutes less the few seconds since the block started, counting down.
    await expect.poll(() => row.textContent(), { timeout: 10_000 }).toMatch(/ 1[45] min \d+ s left/);
    expect(await card("login").locator('[data-field="blocks.status"]').textContent()).toBe("1 blocked:");

    let asked = "";
    page.once("dialog", (dialog) => {
      asked = dialog.message();
      return dialog.dismiss();
    });
    await row.getByRole("button", { name: "Lift" }).click();
    expect(asked).toBe(`Lift the block of ${hash} under login? Its counters start from zero too.`);
    expect(await login()).toBe(429);

    page.once("dialog", (dialog) => dialog.accept());
    await row.getByRole("button", { name: "Lift" }).click();
    await expect.poll(status).toBe(`Lifted the block of ${hash} under login; its counters start from zero.`);
    await expect
      .poll(() => card("login").locator('[data-field="blocks.status"]').textContent())
      .toBe("Nobody is blocked.");
    expect(await login()).toBe(200);
    expect((await audit(1))[0]).toMatchObject({ what: `reset of ${hash} under login` });
    expect(await page.content()).not.toContain(user);
  }, 60_000);
});

describe("live lists on the dashboard", () => {
  it("adds an address for a TTL and removes it, asking first: each in effect at once, in the audit trail; a key's value shows only hashed", async () => {
    // Someone blocked meanwhile (what the screenshot shows beside the list).
    for (let i = 0; i < 3; i++) await stack.proxied("/login", { "x-user": "credential-stuffer" });
    const { page, status } = await stack.openDashboard();
    const panel = page.locator('[data-live-list="incident"]');
    await panel.locator("summary").click();
    await expect.poll(() => panel.locator('[data-field="list.count"]').textContent()).toBe("0 entries");

    await panel.locator('input[name="entry"]').fill("203.0.113.0/24");
    await panel.locator('input[name="ttl"]').fill("3600");
    await panel.getByRole("button", { name: "Add to incident" }).click();
    await expect
      .poll(status)
      .toBe("Added for 3600 s to incident: 1 entry now, in effect everywhere within about a second.");
    const entry = panel.locator('[data-list="entries"] li', { hasText: "203.0.113.0/24" });
    expect(await entry.textContent()).toMatch(
      /^203\.0\.113\.0\/24 expires in (1 h 0 min|59 min \d+ s)Remove$/,
    );
    // The stack's client is 203.0.113.50: refused by the deny rule, in the isolate that took the edit at once.
    await expect.poll(() => stack.proxied("/login", { "x-user": "someone" }), { timeout: 2000 }).toBe(403);
    // Counted as the deny rule's refusals, in its row and in the page's summary, at the next refresh.
    const refused = page.locator('[data-action-rule="incident"] [data-field="last5m.denied"]');
    await expect
      .poll(async () => Number(await refused.textContent()), { timeout: 15_000 })
      .toBeGreaterThan(0);
    expect(await page.locator('[data-field="summary.denied"]').first().textContent()).toMatch(/incident/);

    // A key's value: hashed as the proxy hashes it, and the field emptied.
    const key = "scraper-key-5521";
    await panel.locator('input[name="entry"]').fill(key);
    await panel.locator('input[name="ttl"]').fill(""); // kept from the last add: until removed this time
    await panel.getByRole("button", { name: "Add to incident" }).click();
    await expect
      .poll(status)
      .toBe("Added to incident: 2 entries now, in effect everywhere within about a second.");
    await panel.locator('[data-list="entries"] li', { hasText: `hash:${await hashIdentity(key)}` }).waitFor();
    expect(await panel.locator('input[name="entry"]').inputValue()).toBe("");
    expect(await page.content()).not.toContain(key);
    if (SCREENSHOTS) await page.screenshot({ path: docs("dashboard-protect.png"), fullPage: true });

    let asked = "";
    page.once("dialog", (dialog) => {
      asked = dialog.message();
      return dialog.dismiss();
    });
    await entry.getByRole("button", { name: "Remove" }).click();
    expect(asked).toBe(
      "Remove 203.0.113.0/24 from list incident? Every isolate stops matching it within about a second.",
    );
    expect(await stack.proxied("/login", { "x-user": "someone" })).toBe(403);

    page.once("dialog", (dialog) => dialog.accept());
    await entry.getByRole("button", { name: "Remove" }).click();
    await expect
      .poll(status)
      .toBe("Removed 203.0.113.0/24 from incident: 1 entry now, in effect everywhere within about a second.");
    await expect.poll(() => stack.proxied("/login", { "x-user": "someone" }), { timeout: 2000 }).toBe(200);
    expect(await panel.locator('[data-list="entries"] li').count()).toBe(1);

    const [removed, keyAdded, added] = await audit(3);
    expect(removed).toMatchObject({
      what: "edit of list incident",
      before: { count: 2 },
      after: { count: 1, removed: ["203.0.113.0/24"] },
    });
    expect(removed?.who).toMatch(/^session [0-9a-f]{8}$/);
    expect(keyAdded?.after).toEqual({ count: 2, added: [`hash:${await hashIdentity(key)}`] });
    expect(added).toMatchObject({ before: { count: 0 }, after: { count: 1, added: ["203.0.113.0/24"] } });
  }, 60_000);
});
