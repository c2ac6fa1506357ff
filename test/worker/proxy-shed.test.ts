/**
 * Priority load shedding through the Worker (workerd, real Redis, the echo origin's slow path): a budget of
 * 20 requests in flight for the whole origin, classes shed above 90 / 80 / 70 % of it, `critical` only at
 * 100 %. The origin never sees more than the budget; shed requests get 503 temporary-reduced-capacity.
 */
import { describe, expect, it } from "vitest";
import { makeEnv, newTag, originCount, originPeak, type Sent, send, twoInstances } from "./proxy-harness";

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

/** How long an admitted request of the shedding-order test stays at the origin, ms. */
const HOLD_MS = 10_000;

const slow = (env: Record<string, unknown>, tag: string, priority: string, ms: number) =>
  send(env, `/slow?ms=${ms}`, {
    ip: "198.51.100.80",
    headers: { "x-count-tag": tag, "x-priority": priority },
  });

describe("priority load shedding", () => {
  it("never lets more than 20 of 100 concurrent slow requests from two Worker instances reach the origin, and never sheds critical", async () => {
    // One sub-key: the headroom above the highest other class (20 - 18 = 2 slots) is critical's alone.
    const instance = twoInstances(makeEnv([budget({ shards: 1 })]));
    const tag = newTag();
    const classes = [
      ...Array(2).fill("critical"),
      ...Array(30).fill("post"),
      ...Array(34).fill("get"),
      ...Array(34).fill("analytics"),
    ] as string[];
    classes.sort(() => Math.random() - 0.5);
    const responses = await Promise.all(classes.map((priority, i) => slow(instance(i), tag, priority, 1500)));
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
    // One request at a time, each sent only once the one before it is decided (shed, or at the origin), so
    // each is decided with a known number in flight. Admitted ones stay at the origin far longer than the
    // whole sequence takes (a few hundred ms here): in flight only grows while they arrive (checked below).
    const order = Array.from({ length: 27 }, (_, i) => ["analytics", "get", "post"][i % 3] as string);
    const pending: Promise<Sent>[] = [];
    const settled = new Set<number>(); // the requests answered so far
    const admitted: number[] = [];
    const held: number[] = []; // how many were in flight (admitted, not yet answered) when request i was decided
    const sequenceStartedAt = Date.now();
    for (const [i, priority] of order.entries()) {
      held.push(admitted.length);
      const sent = slow(env, tag, priority, HOLD_MS);
      pending.push(sent);
      void sent.finally(() => settled.add(i));
      const reachedOrigin = async () => (await originCount(tag)) > admitted.length;
      await expect
        .poll(async () => settled.has(i) || (await reachedOrigin()), { timeout: 15_000, interval: 10 })
        .toBe(true);
      if (await reachedOrigin()) admitted.push(i);
    }
    // The first admitted request reached the origin after the sequence started and stays there HOLD_MS: had
    // the sequence taken that long, a slot could have been freed before a later decision.
    expect(Date.now() - sequenceStartedAt).toBeLessThan(HOLD_MS);
    const statuses = (await Promise.all(pending)).map((r) => r.status);
    // Each class is admitted exactly while fewer than its share of 20 are in flight, and shed from then on.
    for (const [name, threshold] of [
      ["analytics", 14],
      ["get", 16],
      ["post", 18],
    ] as const) {
      const seen = order.flatMap((p, i) =>
        p === name ? [{ held: held[i] as number, status: statuses[i] }] : [],
      );
      expect(seen.filter((r) => r.status === 200).every((r) => r.held < threshold)).toBe(true);
      expect(seen.filter((r) => r.status !== 200).every((r) => r.held >= threshold && r.status === 503)).toBe(
        true,
      );
      expect(seen.some((r) => r.status === 503)).toBe(true);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(18);
    expect(await originPeak(tag)).toBe(18);
  }, 90_000);

  it("keeps the whole budget exact over two Worker instances when it is split over sub-keys", async () => {
    const instance = twoInstances(makeEnv([budget({ shards: 4 })]));
    const tag = newTag();
    const responses = await Promise.all(
      Array.from({ length: 60 }, (_, i) => slow(instance(i), tag, "critical", 1500)),
    );
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

  it("admits in flight, over two Worker instances, exactly as many of a class as the rules view and the dashboard say it is shed above", async () => {
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

    // Far more than the budget at once, from two Worker instances, held 3 s: every sub-key gets more than it
    // admits (each picks one at random), so each fills to the class's share of it, and none is freed before the
    // last one is decided.
    const instance = twoInstances(env);
    const tag = newTag();
    const responses = await Promise.all(
      Array.from({ length: 90 }, (_, i) => slow(instance(i), tag, "analytics", 3000)),
    );
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
