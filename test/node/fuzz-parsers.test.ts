// Fuzzing of every parser that takes outside input (docs/exactness.md, "Fuzzing"): the rules config, key
// extraction (client IPs, bearer tokens and JWTs, claims), cost headers and the admin API's bodies. Whatever
// they are given: no crash (only the parser's own error, which names the problem), no hang (each input well
// under a budget), nothing half-applied (the input unchanged, and an admin request refused writes nothing).
import fc from "fast-check";
import type { Context } from "hono";
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAdminApp } from "../../src/admin/app";
import { adminContextOf } from "../../src/admin/context";
import { ModeBody, OverrideBody, parseBody } from "../../src/admin/schemas";
import { ConfigError, MAX_UNITS, parseEnv, parseRules } from "../../src/config";
import { parseDurationMs } from "../../src/config/duration";
import { KEY_SOURCE } from "../../src/config/source-fields";
import { parseKey } from "../../src/config/sources";
import { bearerToken, canonicalIp, claimValue, clientIpFrom, ipPrefix64 } from "../../src/identity";
import { createJwtVerifier } from "../../src/identity/jose";
import { RequestFacts } from "../../src/identity/request";
import { headerCost } from "../../src/middleware/cost";
import { InvalidCostError } from "../../src/middleware/errors";
import { EndpointDecider } from "../../src/resilience/decider";
import { ProblemError } from "../../src/util/problem";
import { directRedis, keysUnder, testStore, uniquePrefix } from "./lua-support";

/** Longest one parse of one input may take, ms: far above any honest parse, far below a hang. */
const BUDGET_MS = 50;
const RUNS = 300;

/**
 * Runs `parse`, which must return or throw an error `expected` accepts, within the budget. A parse over it is
 * timed again, twice at most, and the fastest counts: a parser is deterministic, so a hang is slow every
 * time, while a shared machine's stall (a full test run on 2 cores measured 84 ms once) is not.
 */
function survives<T>(parse: () => T, expected: (error: unknown) => boolean): T | undefined {
  let fastest = Number.POSITIVE_INFINITY;
  let result: T | undefined;
  for (let tries = 0; tries < 3 && fastest >= BUDGET_MS; tries++) {
    const startedAt = performance.now();
    try {
      result = parse();
    } catch (error) {
      if (!expected(error)) throw error;
      // A clear error: it names something, and carries no stack into the message.
      expect((error as Error).message.length).toBeGreaterThan(0);
      result = undefined;
    } finally {
      fastest = Math.min(fastest, performance.now() - startedAt);
    }
  }
  expect(fastest).toBeLessThan(BUDGET_MS);
  return result;
}

const isConfigError = (error: unknown) => error instanceof ConfigError;

// ---- Rules config -----------------------------------------------------------------------------------------

const VALID_RULE = { name: "api", key: "ip", algorithm: "fixed-window", limit: 100, period: "1m" };

/** A rule field's value: what a user might write, and what no one should. */
const fieldValue = fc.oneof(
  fc.constantFrom(
    "ip",
    "ip/64",
    "global",
    "header:X-Api-Key",
    "query:key",
    "jwt:sub",
    "fixed-window",
    "sliding-window",
    "token-bucket",
    "gcra",
    "concurrency",
    "shed",
    "1m",
    "30s",
    "1h",
    "0s",
    "-1m",
    "1 fortnight",
    "header:",
    "on",
    "off",
    "monitor",
    "closed",
  ),
  fc.integer({ min: -10, max: 2 * MAX_UNITS }),
  fc.double(),
  fc.string(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.string(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(fc.string(), fc.integer()), { maxKeys: 3 }),
);

const FIELDS = [
  "name",
  "match",
  "key",
  "algorithm",
  "limit",
  "period",
  "burst",
  "cost",
  "delay",
  "priority",
  "priorities",
  "shards",
  "tier",
  "tiers",
  "mode",
  "failure",
  "missing",
  "lease",
  "unknown",
];

/** A valid rule with some fields changed, removed or added: close enough to valid to reach every check. */
const nearlyValidRule = fc
  .tuple(
    fc.dictionary(fc.constantFrom(...FIELDS), fieldValue, { maxKeys: 4 }),
    fc.subarray(Object.keys(VALID_RULE)),
  )
  .map(([changed, removed]) => {
    const rule: Record<string, unknown> = { ...VALID_RULE, ...changed };
    for (const field of removed) delete rule[field];
    return rule;
  });

const rulesInput = fc.oneof(
  fc.array(nearlyValidRule, { maxLength: 4 }),
  fc.array(fc.anything(), { maxLength: 3 }),
  fc.anything(),
);

describe("the rules config", () => {
  it("parses into rules or throws one ConfigError naming each problem, never anything else", () => {
    fc.assert(
      fc.property(rulesInput, fc.boolean(), (input, jwtVerifiable) => {
        const before = structuredClone(input);
        const rules = survives(() => parseRules(input, { label: "rules", jwtVerifiable }), isConfigError);
        // Nothing half-applied: the input is as it was, and a parse that succeeds is whole.
        expect(input).toEqual(before);
        if (rules) {
          expect(rules).toHaveLength((input as unknown[]).length);
          for (const rule of rules) {
            expect(Number.isInteger(rule.limit) && rule.limit >= 1 && rule.limit <= MAX_UNITS).toBe(true);
          }
        }
      }),
      { numRuns: RUNS },
    );
  });

  it("errors say where: each problem names its rule", () => {
    fc.assert(
      fc.property(fc.array(nearlyValidRule, { minLength: 1, maxLength: 4 }), (input) => {
        try {
          parseRules(input, { label: "rules", jwtVerifiable: false });
        } catch (error) {
          if (!(error instanceof ConfigError)) throw error;
          for (const problem of error.problems) expect(problem).toMatch(/^rules(\[\d+\])?/);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it("RATE_LIMIT_RULES as any text: a config or a ConfigError", () => {
    const env = (rules: string) => ({
      UPSTASH_REDIS_REST_URL: "https://example.upstash.io",
      UPSTASH_REDIS_REST_TOKEN: "token",
      ORIGIN_URL: "https://origin.example",
      RATE_LIMIT_RULES: rules,
    });
    const text = fc.oneof(
      fc.string(),
      fc.json(),
      fc.array(nearlyValidRule, { maxLength: 3 }).map((rules) => JSON.stringify(rules)),
    );
    fc.assert(
      fc.property(text, (rules) => {
        survives(() => parseEnv(env(rules) as never), isConfigError);
      }),
      { numRuns: RUNS },
    );
  });

  it("a duration is a number of ms, never NaN, or nothing (its range, infinities included, is its caller's check)", () => {
    fc.assert(
      fc.property(fc.oneof(fc.anything(), fc.string(), fc.stringMatching(/^\d{0,12}[smhd]?$/)), (value) => {
        const ms = survives(
          () => parseDurationMs(value),
          () => false,
        );
        if (ms !== undefined) expect(Number.isInteger(ms) || ms === Infinity || ms === -Infinity).toBe(true);
      }),
      { numRuns: RUNS },
    );
  });

  it("a key source the schema accepts always parses into parts", () => {
    fc.assert(
      fc.property(fc.string(), (source) => {
        if (!KEY_SOURCE.test(source)) return;
        const parts = survives(
          () => parseKey(source),
          () => false,
        );
        expect(parts).toHaveLength(1);
      }),
      { numRuns: RUNS },
    );
  });
});

// ---- Key extraction ---------------------------------------------------------------------------------------

/** Header values a client can send: any text a Headers object accepts (no CR, LF or NUL; Latin-1). */
const headerValue = fc
  .oneof(
    fc.string({ unit: "binary-ascii", maxLength: 200 }),
    fc.ipV4(),
    fc.ipV6(),
    fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), fc.string()), { maxLength: 5 }).map((ips) => ips.join(", ")),
    fc.string({ maxLength: 20 }).map((s) => `Bearer ${s}`),
    fc.tuple(fc.base64String(), fc.base64String(), fc.base64String()).map((p) => `Bearer ${p.join(".")}`),
  )
  .map((value) => value.replace(/[\r\n\0]/g, "").replace(/[^\x20-\xff\t]/g, ""));

describe("key extraction", () => {
  it("a client IP header: one canonical IP (or the text itself), idempotent, never a throw", () => {
    fc.assert(
      fc.property(headerValue, (value) => {
        const headers = new Headers({ "x-client-ip": value });
        const ip = survives(
          () => clientIpFrom(headers, "x-client-ip"),
          () => false,
        );
        if (ip === undefined) return;
        expect(canonicalIp(ip)).toBe(ip);
        survives(
          () => ipPrefix64(ip),
          () => false,
        );
      }),
      { numRuns: RUNS },
    );
  });

  it("IPs in every spelling: the same address gives the same canonical text", () => {
    fc.assert(
      fc.property(fc.ipV6(), (ip) => {
        expect(canonicalIp(ip.toUpperCase())).toBe(canonicalIp(ip));
        expect(canonicalIp(` ${ip} `)).toBe(canonicalIp(ip));
      }),
      { numRuns: RUNS },
    );
  });

  it("a bearer token is found or not, within budget, even on long hostile input", () => {
    const hostile = fc
      .tuple(fc.constantFrom("Bearer ", "bearer  ", ""), fc.string({ unit: "binary-ascii", maxLength: 5000 }))
      .map(([head, tail]) => head + tail.replace(/[\r\n\0]/g, "").replace(/[^\x20-\x7e]/g, "a"));
    fc.assert(
      fc.property(fc.oneof(headerValue, hostile), (value) => {
        const token = survives(
          () => bearerToken(new Headers({ authorization: value })),
          () => false,
        );
        if (token !== undefined) expect(token.split(".")).toHaveLength(3);
      }),
      { numRuns: RUNS },
    );
  });

  it("a JWT of any shape is an identity only when it verifies: never a throw", async () => {
    const verify = createJwtVerifier({ secret: "fuzz-secret" }, { timeoutMs: 200 });
    const segment = fc.oneof(
      fc.base64String(),
      fc.json().map((j) => Buffer.from(j).toString("base64url")),
      fc.string(),
    );
    await fc.assert(
      fc.asyncProperty(fc.tuple(segment, segment, segment), async (parts) => {
        const payload = await verify?.(parts.join("."));
        expect(payload).toBeUndefined(); // nothing random is signed with our secret
      }),
      { numRuns: RUNS },
    );
  });

  it("a claim of any payload is text or nothing, never an object", () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue()), fc.string(), (payload, claim) => {
        const value = survives(
          () => claimValue(payload, claim),
          () => false,
        );
        if (value !== undefined) expect(typeof value).toBe("string");
      }),
      { numRuns: RUNS },
    );
  });

  it("a request URL of any text: its facts, or a 400 problem", () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.webUrl({ withQueryParameters: true, withFragments: true }), fc.string()),
        (url) => {
          const request = { url, headers: new Headers() } as unknown as Request;
          const identity = survives(
            () => new RequestFacts(request, { clientIpHeader: "x-client-ip" }),
            (error) => error instanceof ProblemError && error.status === 400,
          );
          if (identity)
            survives(
              () => identity.path,
              () => false,
            );
        },
      ),
      { numRuns: RUNS },
    );
  });
});

// ---- Cost headers -----------------------------------------------------------------------------------------

describe("cost headers", () => {
  const [rule] = parseRules(
    [{ name: "c", key: "ip", algorithm: "fixed-window", limit: 100, period: "1m", cost: "header:X-Cost" }],
    { label: "rules", jwtVerifiable: false },
  );
  const contextWith = (value: string | undefined) =>
    ({ req: { header: (name: string) => (name.toLowerCase() === "x-cost" ? value : undefined) } }) as Context;

  it("a whole number from 1 to MAX_UNITS, else a 400 naming the rule", () => {
    const value = fc.oneof(
      fc.string(),
      fc.integer({ min: -5, max: 2 * MAX_UNITS }).map(String),
      fc.double().map(String),
      fc.stringMatching(/^\s*\d{1,12}\s*$/),
      fc.constant(undefined),
    );
    fc.assert(
      fc.property(value, (header) => {
        const cost = survives(
          () => headerCost(contextWith(header), rule as never),
          (error) =>
            error instanceof InvalidCostError && error.status === 400 && error.message.includes('"c"'),
        );
        if (cost !== undefined) expect(Number.isInteger(cost) && cost >= 1 && cost <= MAX_UNITS).toBe(true);
        if (header === undefined) expect(cost).toBe(1);
      }),
      { numRuns: RUNS },
    );
  });
});

// ---- Admin API bodies -------------------------------------------------------------------------------------

const bodyText = fc.oneof(
  fc.string(),
  fc.json(),
  fc
    .record(
      {
        limit: fc.oneof(fc.integer({ min: -3, max: 2 * MAX_UNITS }), fc.double(), fc.string()),
        period: fc.oneof(fc.constantFrom("1m", "30s", "0s", "1 fortnight", "31d"), fc.integer(), fc.string()),
        burst: fc.oneof(fc.integer({ min: -3, max: 100 }), fc.constant(null)),
        ttl: fc.oneof(fc.integer({ min: -3, max: 400_000_000 }), fc.double()),
        mode: fc.constantFrom("on", "off", "monitor", null, "offf"),
        rule: fc.oneof(fc.string(), fc.integer()),
        extra: fc.anything(),
      },
      { requiredKeys: [] },
    )
    .map((body) => JSON.stringify(body)),
);

const put = (text: string) =>
  new Request("http://edge.test/x", {
    method: "PUT",
    body: text,
    headers: { "Content-Type": "application/json" },
  });

describe("admin API bodies", () => {
  it("an override body: valid fields within range, or a 400 naming the field", async () => {
    await fc.assert(
      fc.asyncProperty(bodyText, async (text) => {
        try {
          const body = await parseBody(put(text), OverrideBody);
          expect(Number.isInteger(body.limit) && body.limit >= 1 && body.limit <= MAX_UNITS).toBe(true);
          if (body.period !== undefined) expect(body.period).toBeGreaterThanOrEqual(1000);
        } catch (error) {
          expect(error).toBeInstanceOf(ProblemError);
          expect((error as ProblemError).status).toBe(400);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it("a mode body: a mode or null, or a 400", async () => {
    await fc.assert(
      fc.asyncProperty(bodyText, async (text) => {
        try {
          const body = await parseBody(put(text), ModeBody);
          expect([null, "on", "off", "monitor"]).toContain(body.mode);
        } catch (error) {
          expect(error).toBeInstanceOf(ProblemError);
          expect((error as ProblemError).status).toBe(400);
        }
      }),
      { numRuns: RUNS },
    );
  });

  describe("through the admin app on real Redis", () => {
    const prefix = uniquePrefix("fuzz-admin");
    const TOKEN = "fuzz-admin-token-0123456789abcdef";
    let redis: IORedis;
    let app: ReturnType<typeof createAdminApp>;
    beforeAll(() => {
      redis = directRedis();
      const store = testStore(prefix);
      const rules = parseRules([VALID_RULE], { label: "rules", jwtVerifiable: false });
      const config = {
        rules,
        prefix,
        adminToken: TOKEN,
        mode: "on",
        failure: "open",
        timeoutMs: 1000,
        clientIpHeader: "cf-connecting-ip",
      } as const;
      const context = adminContextOf({ config, stores: [store], decider: new EndpointDecider(store) });
      app = createAdminApp(() => context);
    });
    afterAll(() => redis.quit());

    /** Every key under the prefix with its value (a hash's fields), to compare before and after. */
    async function snapshot(): Promise<Record<string, unknown>> {
      const out: Record<string, unknown> = {};
      for (const key of (await keysUnder(redis, prefix)).sort()) {
        const type = await redis.type(key);
        out[key] =
          type === "hash" ? await redis.hgetall(key) : type === "string" ? await redis.get(key) : type;
      }
      return out;
    }

    it("a PUT of any body: 200, or a 400 that wrote nothing (never a 500)", async () => {
      let n = 0;
      await fc.assert(
        fc.asyncProperty(bodyText, async (text) => {
          const before = await snapshot();
          const response = await app.fetch(
            new Request(`http://edge.test/overrides/api/192.0.2.${n++ % 250}`, {
              method: "PUT",
              body: text,
              headers: { "Content-Type": "application/json", Authorization: `Bearer ${TOKEN}` },
            }),
          );
          expect([200, 400]).toContain(response.status);
          const answer = (await response.json()) as { detail?: string };
          if (response.status === 400) {
            expect(answer.detail ?? "").not.toMatch(/\n\s+at /); // no stack trace
            expect(await snapshot()).toEqual(before);
          }
        }),
        { numRuns: 100 },
      );
    }, 60_000);
  });
});
