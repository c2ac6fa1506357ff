// Action rules and live lists through the real Worker (bundled as for deploy), TWO instances (each its own
// Miniflare/workerd, its own isolate) in front of the run's one Redis (docs/lists.md): a deny answers 403
// naming its rule without a Redis call, an allow exempts a client from every later rule, and a list edited
// through one instance's admin API is obeyed by the other within about a second.
import { describe, expect, it } from "vitest";
import { useWorkers } from "../support/workers";

const TOKEN = "lists-test-admin-token-0123456789abcdef";
const ADMIN = { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" };

const RULES = [
  { name: "partners", action: "allow", match: { list: "partners" } },
  { name: "office", action: "allow", match: { ip: ["192.0.2.0/28", "2001:db8:aaaa::/48"] } },
  { name: "incident", action: "deny", match: { list: "incident" } },
  { name: "bad-keys", action: "deny", key: "header:x-api-key", match: { list: "bad-keys" } },
  { name: "no-curl", action: "deny", match: { path: "/api/*", user_agent: ["*curl*"] } },
  { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 2, period: "1h" },
  { name: "legacy", action: "deny", match: { ip: ["203.0.113.0/24"] } },
];

const fleet = useWorkers({
  name: "lists",
  bindings: { RATE_LIMIT_RULES: RULES, RATE_LIMIT_TIMEOUT_MS: "5000", RATE_LIMIT_ADMIN_TOKEN: TOKEN },
});
const { prefix } = fleet;

const worker = (i: number) => fleet.at(i);

/** One request from `ip` to instance `i`; its status. */
async function statusOf(i: number, ip: string, path = "/x", headers: Record<string, string> = {}) {
  const response = await worker(i).fetch(path, { headers: { "CF-Connecting-IP": ip, ...headers } });
  await response.arrayBuffer();
  return response.status;
}

/**
 * The commands Redis runs that name this file's prefix while `during` runs (MONITOR sees every client's; the
 * prefix keeps other test files' out).
 */
async function commandsDuring(during: () => Promise<void>): Promise<string[]> {
  const monitor = await fleet.direct.monitor();
  const seen: string[] = [];
  monitor.on("monitor", (_time: string, args: string[]) => {
    if (args.some((arg) => String(arg).includes(prefix))) seen.push(args.join(" "));
  });
  try {
    await during();
    await new Promise((resolve) => setTimeout(resolve, 100));
  } finally {
    monitor.disconnect();
  }
  return seen;
}

describe("action rules", () => {
  it("a deny answers 403 problem+json naming the rule, counts nothing and calls no Redis", async () => {
    // Warm both isolates first: a fresh isolate reads its live modes once.
    expect(await statusOf(0, "198.51.100.1", "/warm")).toBe(200);
    expect(await statusOf(1, "198.51.100.1", "/warm")).toBe(200);
    let bodies: Record<string, unknown>[] = [];
    const commands = await commandsDuring(async () => {
      const responses = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          worker(i % 2).fetch("/api/things", {
            headers: { "CF-Connecting-IP": `198.51.100.${20 + i}`, "User-Agent": "curl/8.4.0" },
          }),
        ),
      );
      for (const response of responses) {
        expect(response.status).toBe(403);
        expect(response.headers.get("Content-Type")).toBe("application/problem+json");
        expect(response.headers.get("Cache-Control")).toBe("no-store");
      }
      bodies = await Promise.all(responses.map((r) => r.json() as Promise<Record<string, unknown>>));
    });
    expect(bodies[0]).toEqual({
      type: "about:blank",
      title: "Forbidden",
      status: 403,
      detail: 'Rule "no-curl" denies this request.',
      rule: "no-curl",
    });
    // No decision for any of them (a live-mode refresh, HMGET of the mode hash, may fall in the window).
    expect(commands.filter((command) => !/^hmget /i.test(command))).toEqual([]);
    // Nothing counted: the same client, without curl, still has its 2 requests.
    expect(await statusOf(0, "198.51.100.20", "/api/things")).toBe(200);
    expect(await statusOf(1, "198.51.100.20", "/api/things")).toBe(200);
    expect(await statusOf(0, "198.51.100.20", "/api/things")).toBe(429);
  });

  it("an allow exempts a client from every later rule, on both instances; other clients are limited", async () => {
    const statuses = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        statusOf(i % 2, i % 3 === 0 ? "192.0.2.5" : "::ffff:192.0.2.9", "/api/x", { "User-Agent": "curl/8" }),
      ),
    );
    expect(statuses).toEqual(Array(12).fill(200));
    expect(await statusOf(1, "2001:DB8:AAAA:1::7")).toBe(200);
    const others = [];
    for (let i = 0; i < 4; i++) others.push(await statusOf(i % 2, "192.0.2.16"));
    expect(others).toEqual([200, 200, 429, 429]);
  });

  it("a deny after a counting rule is still a 403, and counts nothing in the rule before it", async () => {
    expect(await statusOf(0, "203.0.113.5")).toBe(403);
    expect(await statusOf(1, "::ffff:203.0.113.5")).toBe(403);
    const state = await fleet.direct.keys(`${prefix}:per-ip:*`);
    expect(state.length).toBeGreaterThan(0); // the other tests' clients were counted …
    const before = state.length;
    for (let i = 0; i < 3; i++) expect(await statusOf(i % 2, `203.0.113.${40 + i}`)).toBe(403);
    expect((await fleet.direct.keys(`${prefix}:per-ip:*`)).length).toBe(before); // … these were not
  });
});

/** An admin request to instance `i`: its status and JSON body. */
async function admin(i: number, method: string, path: string, body?: unknown) {
  const response = await worker(i).fetch(`/__floodgate${path}`, {
    method,
    headers: ADMIN,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** Polls `probe` every 50 ms until it is true; how long that took, ms (throws after `withinMs`). */
async function until(probe: () => Promise<boolean>, withinMs: number): Promise<number> {
  const startedAt = Date.now();
  while (!(await probe())) {
    if (Date.now() - startedAt > withinMs) throw new Error(`not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return Date.now() - startedAt;
}

let poll = 0;
/** A new address inside 198.51.100.0/24 on every call (each one a fresh client for the counting rule). */
const freshIn24 = () => `198.51.100.${100 + (poll++ % 150)}`;

describe("live lists", () => {
  it("a CIDR deny entry added through one instance's admin API reaches the other within 2 s, and is lifted as fast", async () => {
    expect(await statusOf(1, freshIn24())).toBe(200); // instance 1 is warm and lets the /24 in
    const added = await admin(0, "PATCH", "/lists/incident", { add: ["198.51.100.0/24"] });
    expect(added).toMatchObject({ status: 200, body: { name: "incident", count: 1, used_by: ["incident"] } });
    const reached = await until(async () => (await statusOf(1, freshIn24())) === 403, 5000);
    expect(reached).toBeLessThan(2000);
    expect(await statusOf(0, freshIn24())).toBe(403); // and the instance that wrote it
    expect(await statusOf(1, "198.51.101.1")).toBe(200); // outside the /24

    const lifted = await admin(1, "PATCH", "/lists/incident", { remove: ["198.51.100.0/24"] });
    expect(lifted.body.count).toBe(0);
    expect(await until(async () => (await statusOf(0, freshIn24())) === 200, 5000)).toBeLessThan(2000);
  });

  it("an allow-listed IP is never limited by later rules, on either instance", async () => {
    expect((await admin(1, "PUT", "/lists/partners", { entries: ["192.0.2.128/25"] })).status).toBe(200);
    // Until an instance holds the list, a curl on /api is refused by the rule after the allow (nothing counted).
    for (const i of [0, 1]) {
      await until(
        async () => (await statusOf(i, "192.0.2.131", "/api/x", { "User-Agent": "curl/8" })) === 200,
        5000,
      );
    }
    const statuses = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        statusOf(i % 2, "192.0.2.200", "/api/x", { "User-Agent": "curl/8" }),
      ),
    );
    expect(statuses).toEqual(Array(20).fill(200));
    // Not listed: limited (2 an hour), and a curl on /api refused.
    expect(await statusOf(0, "192.0.2.100", "/api/x", { "User-Agent": "curl/8" })).toBe(403);
    const others = [];
    for (let i = 0; i < 3; i++) others.push(await statusOf(i % 2, "192.0.2.100"));
    expect(others).toEqual([200, 200, 429]);
  });

  it("IPv6 and IPv4-mapped forms of one address match the same entry", async () => {
    const put = await admin(0, "PUT", "/lists/incident", {
      entries: ["::ffff:100.64.0.9", "2001:DB8:BAD::/48", "100.64.1.0/24"],
    });
    expect(put.status).toBe(200);
    const read = await admin(0, "GET", "/lists/incident");
    expect(read.body.entries).toEqual(["100.64.0.9", "100.64.1.0/24", "2001:db8:bad::/48"]);
    for (const i of [0, 1]) {
      await until(async () => (await statusOf(i, "100.64.0.9")) === 403, 5000);
      for (const ip of [
        "::ffff:100.64.0.9",
        "::FFFF:6440:9",
        "0:0:0:0:0:ffff:100.64.0.9",
        "::ffff:100.64.1.77",
      ]) {
        expect(await statusOf(i, ip), ip).toBe(403);
      }
      expect(await statusOf(i, "2001:db8:bad:ffff::1")).toBe(403);
      expect(await statusOf(i, "2001:db8:bae::1")).toBe(200);
      expect(await statusOf(i, "::ffff:100.64.0.10")).toBe(200);
    }
  });

  it("refuses hostile input with a 400 naming it, and changes nothing", async () => {
    const original = await admin(0, "PUT", "/lists/hostile", { entries: ["10.1.0.0/16", "key-1"] });
    expect(original.status).toBe(200);
    const before = await admin(0, "GET", "/lists/hostile");
    const many = Array.from(
      { length: 200_000 },
      (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    );
    const refusals: [string, string, unknown, string][] = [
      [
        "PUT",
        "bad CIDR",
        { entries: ["10.0.0.0/8", "10.2.0.0/16", "10.0.0.0/33"] },
        'entries[2]: "10.0.0.0/33" has no valid prefix length (0..32 after "/")',
      ],
      [
        "PUT",
        "host bits",
        { entries: ["10.0.0.7/8"] },
        'entries[0]: "10.0.0.7/8" has host bits set (the network is 10.0.0.0/8)',
      ],
      [
        "PUT",
        "not an address",
        { entries: ["10.0.0.256"] },
        'entries[0]: "10.0.0.256" is not an IP address or CIDR',
      ],
      [
        "PUT",
        "200,000 entries",
        { entries: many },
        "entries: 200000 entries, more than a list may hold (100000)",
      ],
      [
        "PUT",
        "overlong",
        { entries: ["10.0.0.0/8", "k".repeat(257)] },
        "entries[1]: longer than 256 characters",
      ],
      [
        "PATCH",
        "bad remove",
        { add: ["10.3.0.0/16"], remove: ["::ffff:1.2.3.4/95"] },
        'remove[0]: "::ffff:1.2.3.4/95" is wider than the IPv4-mapped range (::ffff:0:0/96)',
      ],
      [
        "PATCH",
        "over the cap",
        { add: many.slice(0, 99_999) },
        "The list would hold 100001 entries, more than a list may hold (100000); nothing was changed.",
      ],
      [
        "PUT",
        "bad TTL",
        { entries: [{ entry: "10.4.0.0/16", ttl: -5 }] },
        "entries[0].ttl: must be a whole number of seconds from 1 to 315360000",
      ],
      ["PUT", "not JSON", "{", "The body must be JSON."],
    ];
    for (const [method, what, body, detail] of refusals) {
      const response = await worker(0).fetch("/__floodgate/lists/hostile", {
        method,
        headers: ADMIN,
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      expect(response.status, what).toBe(400);
      expect(response.headers.get("Content-Type"), what).toBe("application/problem+json");
      expect(((await response.json()) as { detail: string }).detail, what).toBe(detail);
    }
    expect(await admin(0, "GET", "/lists/hostile")).toEqual(before);
    expect(before.body).toMatchObject({ count: 2, used_by: [] });
    // No staged keys left behind.
    expect(await fleet.direct.keys(`${prefix}:list:{hostile}:stage:*`)).toEqual([]);
  }, 60_000);

  it("an identity entry denies the identity the rule's key extracts; GET shows it hashed", async () => {
    expect((await admin(1, "PUT", "/lists/bad-keys", { entries: ["stolen-key-1"] })).status).toBe(200);
    const listed = await admin(0, "GET", "/lists/bad-keys");
    expect(listed.body.entries).toEqual([expect.stringMatching(/^hash:[A-Za-z0-9_-]{22}$/)]);
    for (const i of [0, 1]) {
      await until(
        async () => (await statusOf(i, "100.70.0.1", "/x", { "x-api-key": "stolen-key-1" })) === 403,
        5000,
      );
      expect(await statusOf(i, "100.70.0.2", "/x", { "x-api-key": "another-key" })).toBe(200);
    }
  });

  it("an entry's TTL ends it in every isolate", async () => {
    await admin(0, "PATCH", "/lists/incident", { add: [{ entry: "100.80.0.0/16", ttl: 2 }] });
    const read = await admin(0, "GET", "/lists/incident");
    expect(read.body.entries).toContainEqual({ entry: "100.80.0.0/16", ttl: 2 });
    await until(async () => (await statusOf(1, "100.80.0.1")) === 403, 5000);
    await until(async () => (await statusOf(1, "100.80.0.2")) === 200, 5000);
    expect(await statusOf(0, "100.80.0.3")).toBe(200);
  });

  it("a list of 100,000 CIDRs loads in every isolate without holding requests, and is matched", async () => {
    const entries = Array.from(
      { length: 100_000 },
      (_, i) => `100.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`,
    );
    const put = await admin(1, "PUT", "/lists/incident", { entries });
    expect(put.body.count).toBe(100_000);
    for (const i of [0, 1]) {
      // While the list loads, requests are answered (a listed client goes on to the counting rules).
      await until(async () => (await statusOf(i, "100.97.134.159")) === 403, 15_000);
      expect(await statusOf(i, "100.96.0.0")).toBe(403);
      expect(await statusOf(i, "100.98.0.1")).toBe(200);
    }
  }, 60_000);
});
