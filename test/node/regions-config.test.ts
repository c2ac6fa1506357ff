/**
 * Regions in the bindings (docs/regions.md): `RATE_LIMIT_REGIONS` as a TOML table or a JSON string, each
 * region's database from `UPSTASH_REDIS_REST_URL_<NAME>` / `_TOKEN_<NAME>`, `RATE_LIMIT_REGION` pinning a
 * Worker; every mistake names the binding and the region, never a token; a request's region by its colo, then
 * its continent.
 */
import { describe, expect, it } from "vitest";
import { ConfigError, parseEnv, regionChooser } from "../../src/config";
import type { Env } from "../../src/env";

const RULES = JSON.stringify([
  { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 10, period: "1m" },
]);
const SECRET = "s3cret-token-AAAA";
const BASE = {
  ORIGIN_URL: "https://origin.example.com",
  UPSTASH_REDIS_REST_URL: "https://primary.upstash.io",
  UPSTASH_REDIS_REST_TOKEN: SECRET,
  RATE_LIMIT_RULES: RULES,
};
const EU = { UPSTASH_REDIS_REST_URL_EU: "https://eu.upstash.io", UPSTASH_REDIS_REST_TOKEN_EU: SECRET };
const US = { UPSTASH_REDIS_REST_URL_US: "https://us.upstash.io", UPSTASH_REDIS_REST_TOKEN_US: SECRET };

const parse = (bindings: Record<string, unknown>) => parseEnv({ ...BASE, ...bindings } as unknown as Env);

function problem(bindings: Record<string, unknown>): string {
  try {
    parse(bindings);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).not.toContain(SECRET);
    return (error as Error).message;
  }
  throw new Error("expected a ConfigError");
}

describe("RATE_LIMIT_REGIONS", () => {
  it("takes a TOML table or a JSON string, each region with its own database", () => {
    const table = { eu: ["EU", "AF"], us: ["NA", "SA", "yyz"] };
    for (const value of [table, JSON.stringify(table)]) {
      const { regions } = parse({ RATE_LIMIT_REGIONS: value, ...EU, ...US }).regions;
      expect(regions).toEqual([
        { name: "eu", url: "https://eu.upstash.io", token: SECRET, serves: ["EU", "AF"] },
        { name: "us", url: "https://us.upstash.io", token: SECRET, serves: ["NA", "SA", "YYZ"] },
      ]);
    }
  });

  it("without it there are no regions, and the primary decides everything", () => {
    expect(parse({}).regions).toEqual({ regions: [] });
    expect(regionChooser(parse({}).regions)).toBeUndefined();
  });

  it("names the missing binding of a region's database", () => {
    const message = problem({ RATE_LIMIT_REGIONS: { eu: ["EU"], us: ["NA"] }, ...EU });
    expect(message).toContain("UPSTASH_REDIS_REST_URL_US: required for region us of RATE_LIMIT_REGIONS");
    expect(message).toContain("UPSTASH_REDIS_REST_TOKEN_US: required for region us");
  });

  it("names a bad URL or token by its binding, never showing the token", () => {
    const message = problem({
      RATE_LIMIT_REGIONS: { eu: ["EU"] },
      UPSTASH_REDIS_REST_URL_EU: "redis://eu.example.com:6379",
      UPSTASH_REDIS_REST_TOKEN_EU: `${SECRET}\n`,
    });
    expect(message).toContain("UPSTASH_REDIS_REST_URL_EU:");
    expect(
      problem({ RATE_LIMIT_REGIONS: { eu: ["EU"] }, ...EU, UPSTASH_REDIS_REST_TOKEN_EU: "a\u0001b" }),
    ).toContain("UPSTASH_REDIS_REST_TOKEN_EU:");
  });

  it("names an unknown continent, a place served twice, a bad region name and a bad shape", () => {
    expect(problem({ RATE_LIMIT_REGIONS: { eu: ["EUROPE"] }, ...EU })).toContain(
      'RATE_LIMIT_REGIONS.eu: "EUROPE" is neither a continent code',
    );
    expect(problem({ RATE_LIMIT_REGIONS: { eu: ["EU"], us: ["EU"] }, ...EU, ...US })).toContain(
      "RATE_LIMIT_REGIONS.us: EU is served by region eu already",
    );
    expect(problem({ RATE_LIMIT_REGIONS: { "e-u": ["EU"] } })).toContain(
      "RATE_LIMIT_REGIONS.e-u: a region's name",
    );
    expect(problem({ RATE_LIMIT_REGIONS: { eu: "EU" }, ...EU })).toContain(
      "RATE_LIMIT_REGIONS.eu: expected an array",
    );
    expect(problem({ RATE_LIMIT_REGIONS: "{eu" })).toContain("RATE_LIMIT_REGIONS: not valid JSON");
    expect(problem({ RATE_LIMIT_REGIONS: ["EU"] })).toContain("RATE_LIMIT_REGIONS: expected a table");
  });

  it("RATE_LIMIT_REGION must name one of the regions", () => {
    expect(problem({ RATE_LIMIT_REGIONS: { eu: ["EU"] }, ...EU, RATE_LIMIT_REGION: "us" })).toContain(
      'RATE_LIMIT_REGION: "us" is not a region of RATE_LIMIT_REGIONS (eu)',
    );
    expect(problem({ RATE_LIMIT_REGION: "eu" })).toContain("RATE_LIMIT_REGION:");
  });
});

describe("the region of a request", () => {
  const settings = parse({
    RATE_LIMIT_REGIONS: { eu: ["EU", "AF"], us: ["NA", "SIN"] },
    ...EU,
    ...US,
  }).regions;
  const regionOf = regionChooser(settings) as (cf: object | undefined) => string | undefined;

  it("is its colo's region, else its continent's, else none (the primary)", () => {
    expect(regionOf({ continent: "EU", colo: "FRA" })).toBe("eu");
    expect(regionOf({ continent: "AS", colo: "SIN" })).toBe("us");
    expect(regionOf({ continent: "OC", colo: "SYD" })).toBeUndefined();
    expect(regionOf(undefined)).toBeUndefined();
  });

  it("is the pinned one whatever request.cf says", () => {
    const pinned = regionChooser({ ...settings, pinned: "us" }) as (
      cf: object | undefined,
    ) => string | undefined;
    expect(pinned({ continent: "EU" })).toBe("us");
    expect(pinned(undefined)).toBe("us");
  });
});
