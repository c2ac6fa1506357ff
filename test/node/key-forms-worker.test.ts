// Keys from Cloudflare's request facts and cookies (docs/protect.md), through the real Worker (bundled as for
// deploy, run in Miniflare/workerd) over the run's redis-server: `request.cf` is set per request with
// Miniflare's `cf` option, as Cloudflare's edge sets it in production.
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import { startWorker } from "../support/miniflare-worker.mjs";

type Worker = Awaited<ReturnType<typeof startWorker>>;

const PREFIX = `keyforms${Date.now()}`;
const RULES = [
  {
    name: "country",
    match: { path: "/country" },
    key: "cf:country",
    algorithm: "fixed-window",
    limit: 2,
    period: "1h",
  },
  {
    name: "asn",
    match: { path: "/asn" },
    key: "cf:asn",
    algorithm: "fixed-window",
    limit: 1,
    period: "1h",
    missing: "deny",
  },
  {
    name: "ja4",
    match: { path: "/ja4" },
    key: "cf:ja4",
    algorithm: "fixed-window",
    limit: 1,
    period: "1h",
    missing: "skip",
  },
  {
    name: "session",
    match: { path: "/session" },
    key: ["cookie:sid", "cf:colo"],
    algorithm: "fixed-window",
    limit: 1,
    period: "1h",
    missing: "deny",
  },
  {
    name: "by-colo",
    match: { path: "/tiered" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 1,
    period: "1h",
    tier: "cf:colo",
    tiers: { AMS: { limit: 3 } },
  },
];

let worker: Worker;
let direct: IORedis;

beforeAll(async () => {
  direct = new IORedis(inject("redisUrl"), { maxRetriesPerRequest: 1 });
  worker = await startWorker({
    bindings: {
      ORIGIN_URL: inject("originUrl"),
      UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
      UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      RATE_LIMIT_RULES: RULES,
      RATE_LIMIT_PREFIX: PREFIX,
      RATE_LIMIT_LEASES: "off",
    },
  });
});

afterAll(async () => {
  await worker?.dispose();
  direct?.disconnect();
});

const send = async (path: string, cf: Record<string, unknown>, headers: Record<string, string> = {}) => {
  const response = await worker.fetch(path, {
    headers: { "CF-Connecting-IP": "192.0.2.10", ...headers },
    cf,
  } as RequestInit);
  await response.text();
  return response.status;
};

it("counts every client of one country in one bucket, and each country apart", async () => {
  expect(await send("/country", { country: "DE" }, { "CF-Connecting-IP": "192.0.2.1" })).toBe(200);
  expect(await send("/country", { country: "DE" }, { "CF-Connecting-IP": "192.0.2.2" })).toBe(200);
  // A third German address: the country's bucket is full, whatever the IP.
  expect(await send("/country", { country: "DE" }, { "CF-Connecting-IP": "192.0.2.3" })).toBe(429);
  expect(await send("/country", { country: "FR" }, { "CF-Connecting-IP": "192.0.2.3" })).toBe(200);
  // The identity hashed into the key is the country code itself (what the admin API names it by).
  expect(await direct.get(stateKey(PREFIX, "country", await hashIdentity("DE")))).toBe("2");
});

it("reads the ASN as its decimal number, and a request without one follows the rule's missing", async () => {
  expect(await send("/asn", { asn: 64500 })).toBe(200);
  expect(await send("/asn", { asn: 64500 })).toBe(429);
  expect(await send("/asn", { asn: 64501 })).toBe(200);
  expect(await direct.get(stateKey(PREFIX, "asn", await hashIdentity("64500")))).toBe("1");
  // No ASN known (off Cloudflare, or Cloudflare did not say): `missing = "deny"` answers 401 naming the key.
  // (Miniflare fills the facts a test leaves out from its defaults, so the test blanks it out.)
  const response = await worker.fetch("/asn", {
    headers: { "CF-Connecting-IP": "192.0.2.10" },
    cf: { asn: null },
  } as RequestInit);
  expect(response.status).toBe(401);
  expect(await response.text()).toContain("cf:asn");
});

it('reads the JA4 fingerprint from Bot Management\'s facts; without one, `missing = "skip"` lets it through uncounted', async () => {
  const ja4 = "t13d1516h2_8daaf6152771_02713d6af862";
  expect(await send("/ja4", { botManagement: { ja4 } })).toBe(200);
  expect(await send("/ja4", { botManagement: { ja4 } })).toBe(429);
  expect(await direct.get(stateKey(PREFIX, "ja4", await hashIdentity(ja4)))).toBe("1");
  for (let i = 0; i < 3; i++) expect(await send("/ja4", {})).toBe(200);
});

it("keys a composite on a cookie and the colo; a cookie sent twice is no identity", async () => {
  const cookie = (value: string) => ({ Cookie: `theme=dark; sid=${value}; other=1` });
  expect(await send("/session", { colo: "AMS" }, cookie("abc"))).toBe(200);
  expect(await send("/session", { colo: "AMS" }, cookie("abc"))).toBe(429);
  // Another colo, or another session: another identity.
  expect(await send("/session", { colo: "FRA" }, cookie("abc"))).toBe(200);
  expect(await send("/session", { colo: "AMS" }, cookie("abd"))).toBe(200);
  // Composite identities: each part percent-encoded, joined with "|" (docs/configuration.md, "Rules").
  expect(await direct.get(stateKey(PREFIX, "session", await hashIdentity("abc|AMS")))).toBe("1");
  // Cookie names are case-sensitive, and two values for one name could be either: both missing (401).
  expect(await send("/session", { colo: "AMS" }, { Cookie: "SID=abc" })).toBe(401);
  expect(await send("/session", { colo: "AMS" }, { Cookie: "sid=x1; sid=x2" })).toBe(401);
});

it("takes a tier from the colo", async () => {
  const from = (colo: string, ip: string) => send("/tiered", { colo }, { "CF-Connecting-IP": ip });
  // AMS's tier allows 3, any other colo the rule's own 1.
  for (let i = 0; i < 3; i++) expect(await from("AMS", "192.0.2.50")).toBe(200);
  expect(await from("AMS", "192.0.2.50")).toBe(429);
  expect(await from("LHR", "192.0.2.51")).toBe(200);
  expect(await from("LHR", "192.0.2.51")).toBe(429);
});

it("refuses a cf: fact it does not know, naming the key forms", async () => {
  const broken = await startWorker({
    bindings: {
      ORIGIN_URL: inject("originUrl"),
      UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
      UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      RATE_LIMIT_RULES: [{ name: "city", key: "cf:city", algorithm: "fixed-window", limit: 1, period: "1m" }],
    },
  });
  try {
    const response = await broken.fetch("/x");
    expect(response.status).toBe(500);
    const body = (await response.json()) as { detail: string };
    expect(body.detail).toContain("RATE_LIMIT_RULES[0].key");
    expect(body.detail).toContain('"cf:city" is not a key');
    expect(body.detail).toContain("cf:country|cf:asn|cf:colo|cf:ja4 | cookie:<name>");
  } finally {
    await broken.dispose();
  }
});
