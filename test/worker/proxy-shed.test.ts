/**
 * Priority load shedding through the Worker (workerd, real Redis, the echo origin's slow path): a budget of
 * 20 requests in flight for the whole origin, classes shed above 90 / 80 / 70 % of it, `critical` only at
 * 100 %. The origin never sees more than the budget; shed requests get 503 temporary-reduced-capacity.
 */
import { describe, expect, it } from "vitest";
import { baseEnv, makeEnv, newTag, send } from "./proxy-harness";

const PRIORITIES = { critical: 1, post: 0.9, get: 0.8, analytics: 0.7 };
const budget = (extra: Record<string, unknown> = {}) => ({
  name: "origin",
  key: "global",
  algorithm: "shed",
  limit: 20,
  priority: "header:x-priority",
  priorities: PRIORITIES,
  ...extra,
});

/** The most requests tagged `tag` the origin was answering at once. */
async function originPeak(tag: string): Promise<number> {
  const response = await fetch(`${baseEnv.ORIGIN_URL}/__inflight/${encodeURIComponent(tag)}`);
  return ((await response.json()) as { max: number }).max;
}

const slow = (env: Record<string, unknown>, tag: string, priority: string, ms: number) =>
  send(env, `/slow?ms=${ms}`, {
    ip: "198.51.100.80",
    headers: { "x-count-tag": tag, "x-priority": priority },
  });

describe("priority load shedding", () => {
  it("never lets more than 20 of 100 concurrent slow requests reach the origin, and never sheds critical", async () => {
    // One sub-key: the headroom above the highest other class (20 - 18 = 2 slots) is critical's alone.
    const env = makeEnv([budget({ shards: 1 })]);
    const tag = newTag();
    const classes = [
      ...Array(2).fill("critical"),
      ...Array(30).fill("post"),
      ...Array(34).fill("get"),
      ...Array(34).fill("analytics"),
    ] as string[];
    classes.sort(() => Math.random() - 0.5);
    const responses = await Promise.all(classes.map((priority) => slow(env, tag, priority, 1500)));
    const byClass = (name: string, status: number) =>
      responses.filter((r, i) => classes[i] === name && r.status === status).length;
    expect(byClass("critical", 200)).toBe(2);
    expect(responses.filter((r) => r.status === 200).length).toBeLessThanOrEqual(20);
    expect(await originPeak(tag)).toBeLessThanOrEqual(20);
    // Above 70 % no analytics request gets in: at most 14 of them, however they interleave.
    expect(byClass("analytics", 200)).toBeLessThanOrEqual(14);
    expect(byClass("get", 200) + byClass("analytics", 200)).toBeLessThanOrEqual(16);
    for (const r of responses.filter((r) => r.status !== 200)) {
      expect(r.status).toBe(503);
      expect(r.headers.get("Retry-After")).toBe("1");
      expect(r.headers.get("Content-Type")).toContain("application/problem+json");
      const body = r.json();
      expect(body.type).toBe("https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
      expect(body["violated-policies"]).toEqual(["origin"]);
      expect(["post", "get", "analytics"]).toContain(body.priority);
      expect(r.headers.get("RateLimit")).toBeNull(); // the origin's budget is not the client's quota
    }
  }, 60_000);

  it("sheds the lower classes first as the origin fills up", async () => {
    const env = makeEnv([budget({ shards: 1 })]);
    const tag = newTag();
    // Requests start 50 ms apart and stay at the origin 4 s: in flight only grows while they arrive.
    const order = Array.from({ length: 36 }, (_, i) => ["analytics", "get", "post"][i % 3] as string);
    const pending = [];
    for (const priority of order) {
      pending.push(slow(env, tag, priority, 4000));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const statuses = (await Promise.all(pending)).map((r) => r.status);
    // Each class is admitted exactly while fewer than its share of 20 are in flight, and shed from then on.
    const inFlightBefore = (i: number) => statuses.slice(0, i).filter((s) => s === 200).length;
    for (const [name, threshold] of [
      ["analytics", 14],
      ["get", 16],
      ["post", 18],
    ] as const) {
      const seen = order.flatMap((p, i) =>
        p === name ? [{ held: inFlightBefore(i), status: statuses[i] }] : [],
      );
      expect(seen.filter((r) => r.status === 200).every((r) => r.held < threshold)).toBe(true);
      expect(seen.filter((r) => r.status !== 200).every((r) => r.held >= threshold && r.status === 503)).toBe(
        true,
      );
      expect(seen.some((r) => r.status === 503)).toBe(true);
    }
    expect(await originPeak(tag)).toBe(18);
  }, 60_000);

  it("keeps the whole budget exact when it is split over sub-keys", async () => {
    const env = makeEnv([budget({ shards: 4 })]);
    const tag = newTag();
    const responses = await Promise.all(Array.from({ length: 60 }, () => slow(env, tag, "critical", 1500)));
    const admitted = responses.filter((r) => r.status === 200).length;
    expect(admitted).toBeLessThanOrEqual(20);
    expect(await originPeak(tag)).toBeLessThanOrEqual(20);
    // Four sub-keys of 5: a sub-key that random choice left idle costs the rest, so fewer than 20 may pass.
    expect(admitted).toBeGreaterThanOrEqual(15);
  }, 60_000);

  it("frees a slot when the response is done", async () => {
    const env = makeEnv([budget({ limit: 1, shards: 1 })]);
    const tag = newTag();
    for (let i = 0; i < 3; i++) expect((await slow(env, tag, "critical", 10)).status).toBe(200);
  });

  it("shows the classes in the admin rules view and the dashboard", async () => {
    const env = makeEnv([budget()], { RATE_LIMIT_ADMIN_TOKEN: "shed-admin-token" });
    const response = await send(env, "/__floodgate/rules", {
      headers: { Authorization: "Bearer shed-admin-token" },
    });
    expect(response.status).toBe(200);
    const [rule] = response.json<{ rules: Record<string, unknown>[] }>().rules;
    expect(rule?.algorithm).toBe("shed");
    expect(rule?.shed).toEqual({
      priority: "header:x-priority",
      classes: {
        critical: { share: 1, shedAbove: 20 },
        post: { share: 0.9, shedAbove: 18 },
        get: { share: 0.8, shedAbove: 16 },
        analytics: { share: 0.7, shedAbove: 14 },
      },
      unknownClass: "analytics",
      shards: 2,
    });
    const dashboard = await send(env, "/__floodgate/dashboard.json", {
      headers: { Authorization: "Bearer shed-admin-token" },
    });
    expect(dashboard.json<{ rules: { shaping?: string }[] }>().rules[0]?.shaping).toBe(
      "sheds by header:x-priority: critical above 20, post above 18, get above 16, analytics above 14 in flight",
    );
  });

  it("admits in flight exactly as many of a class as the rules view and the dashboard say it is shed above", async () => {
    // 35 over 3 sub-keys (12, 12, 11): analytics may fill 8 + 8 + 7 = 23 slots, where ⌊35 × 0.7⌋ would say 24.
    const env = makeEnv([budget({ limit: 35, shards: 3 })], { RATE_LIMIT_ADMIN_TOKEN: "shed-admin-token" });
    const admin = { headers: { Authorization: "Bearer shed-admin-token" } };
    const [rule] = (await send(env, "/__floodgate/rules", admin)).json<{
      rules: { shed: { classes: Record<string, { shedAbove: number }> } }[];
    }>().rules;
    const shown = rule?.shed.classes.analytics?.shedAbove;
    expect(shown).toBe(23);
    const shaping = (await send(env, "/__floodgate/dashboard.json", admin)).json<{
      rules: { shaping?: string }[];
    }>().rules[0]?.shaping;
    expect(shaping).toContain(`analytics above ${shown} in flight`);

    // Far more than the budget at once, held 3 s: every sub-key gets more than it admits (each picks one at
    // random), so each fills to the class's share of it, and none is freed before the last one is decided.
    const tag = newTag();
    const responses = await Promise.all(Array.from({ length: 90 }, () => slow(env, tag, "analytics", 3000)));
    expect(responses.filter((r) => r.status === 200).length).toBe(shown);
    expect(await originPeak(tag)).toBe(shown);
  }, 60_000);

  it("names the field of a wrong shed config", async () => {
    const bad = await send(makeEnv([budget({ priorities: { get: 1.5 } })]), "/x");
    expect(bad.status).toBe(500);
    expect(bad.json().detail).toMatch(
      /RATE_LIMIT_RULES\[0\]\.priorities\.get: 1\.5 is not a share of capacity/,
    );
    const elsewhere = await send(makeEnv([{ ...budget(), algorithm: "gcra", period: "1s" }]), "/x");
    expect(elsewhere.json().detail).toMatch(/RATE_LIMIT_RULES\[0\]\.priority: only shed rules have priority/);
  });
});
