/**
 * Regional databases (docs/regions.md): `RATE_LIMIT_REGIONS` maps region names to the Cloudflare continents or
 * colos they serve, e.g. `{ eu = ["EU", "AF"], us = ["NA", "SA"] }` (a TOML table in `[vars]`, or the same as a
 * JSON string); each region's database is `UPSTASH_REDIS_REST_URL_<NAME>` / `UPSTASH_REDIS_REST_TOKEN_<NAME>`
 * (the name upper-cased); `RATE_LIMIT_REGION` pins a Worker to one of them. Messages name the binding and the
 * region, never a token.
 */
import { ConfigError } from "./errors";
import { restTokenProblem, restUrlProblem } from "./endpoints";

/** One region: its name, its database and the places it serves. */
export interface RegionConfig {
  /** As written in `RATE_LIMIT_REGIONS` (lower case). */
  name: string;
  url: string;
  token: string;
  /** Continent codes (`EU`, two letters) and colo codes (`FRA`, three letters) it serves. */
  serves: string[];
}

/** The regions of a configuration, and the one the Worker is pinned to. */
export interface RegionSettings {
  regions: RegionConfig[];
  /** `RATE_LIMIT_REGION`: every request is decided in this region. Absent: by `request.cf`. */
  pinned?: string;
}

const REGIONS = "RATE_LIMIT_REGIONS";
const PINNED = "RATE_LIMIT_REGION";
/** A region's name: it becomes part of two binding names, so letters, digits and `_` only. */
const NAME = /^[a-z][a-z0-9_]{0,31}$/;
/** Cloudflare's `request.cf.continent` values. */
const CONTINENTS = new Set(["AF", "AN", "AS", "EU", "NA", "OC", "SA"]);
/** A colo: `request.cf.colo`, an IATA airport code. */
const COLO = /^[A-Z]{3}$/;

/** The bindings a region's database comes from. */
export const regionBindings = (name: string) => ({
  url: `UPSTASH_REDIS_REST_URL_${name.toUpperCase()}`,
  token: `UPSTASH_REDIS_REST_TOKEN_${name.toUpperCase()}`,
});

/** `RATE_LIMIT_REGIONS` as an object, from its TOML table or JSON string. */
function tableOf(value: unknown): Record<string, unknown> {
  let table = value;
  if (typeof value === "string") {
    try {
      table = JSON.parse(value);
    } catch (error) {
      throw new ConfigError(`${REGIONS}: not valid JSON (${(error as Error).message})`);
    }
  }
  if (typeof table !== "object" || table === null || Array.isArray(table)) {
    throw new ConfigError(
      `${REGIONS}: expected a table of region names to the continents or colos they serve, e.g. { eu = ["EU", "AF"], us = ["NA", "SA"] }`,
    );
  }
  return table as Record<string, unknown>;
}

/**
 * Parses the region bindings of `present` (the non-empty bindings). No `RATE_LIMIT_REGIONS`: no regions.
 * @throws {ConfigError} naming every binding and field that is wrong.
 */
export function parseRegions(present: Readonly<Record<string, unknown>>): RegionSettings {
  const pinned = present[PINNED];
  if (present[REGIONS] === undefined) {
    if (pinned !== undefined) {
      throw new ConfigError(`${PINNED}: set to ${JSON.stringify(pinned)}, but ${REGIONS} names no region`);
    }
    return { regions: [] };
  }
  const table = tableOf(present[REGIONS]);
  const problems: string[] = [];
  const regions: RegionConfig[] = [];
  const servedBy = new Map<string, string>();
  for (const [name, places] of Object.entries(table)) {
    if (!NAME.test(name)) {
      problems.push(
        `${REGIONS}.${name}: a region's name is a lower-case letter, then up to 31 letters, digits or _ (it names the bindings ${regionBindings("<name>").url} and _TOKEN_<NAME>)`,
      );
      continue;
    }
    if (!Array.isArray(places) || !places.every((p) => typeof p === "string")) {
      problems.push(`${REGIONS}.${name}: expected an array of continent codes (EU, NA, …) or colos (FRA, …)`);
      continue;
    }
    const serves: string[] = [];
    for (const place of places as string[]) {
      const code = place.trim().toUpperCase();
      if (!CONTINENTS.has(code) && !COLO.test(code)) {
        problems.push(
          `${REGIONS}.${name}: ${JSON.stringify(place)} is neither a continent code (${[...CONTINENTS].join(", ")}) nor a three-letter colo`,
        );
      } else if (servedBy.has(code)) {
        problems.push(`${REGIONS}.${name}: ${code} is served by region ${servedBy.get(code)} already`);
      } else {
        servedBy.set(code, name);
        serves.push(code);
      }
    }
    const bindings = regionBindings(name);
    const url = present[bindings.url];
    const token = present[bindings.token];
    if (typeof url !== "string") {
      problems.push(`${bindings.url}: required for region ${name} of ${REGIONS} (its database's REST URL)`);
    } else {
      const problem = restUrlProblem(bindings.url, url);
      if (problem) problems.push(problem);
    }
    if (typeof token !== "string") {
      problems.push(`${bindings.token}: required for region ${name} of ${REGIONS} (a secret)`);
    } else {
      const problem = restTokenProblem(bindings.token, token);
      if (problem) problems.push(problem);
    }
    if (typeof url === "string" && typeof token === "string") {
      regions.push({ name, url: url.trim(), token, serves });
    }
  }
  if (Object.keys(table).length === 0) problems.push(`${REGIONS}: names no region`);
  if (pinned !== undefined && (typeof pinned !== "string" || !(pinned in table))) {
    problems.push(
      `${PINNED}: ${JSON.stringify(pinned)} is not a region of ${REGIONS} (${Object.keys(table).join(", ")})`,
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return pinned === undefined ? { regions } : { regions, pinned: pinned as string };
}

/**
 * The region serving a request, by `RATE_LIMIT_REGION` or else its colo, then its continent
 * (`request.cf`); `undefined` = none (decided in the primary).
 */
export function regionChooser(
  settings: RegionSettings,
): ((cf: object | undefined) => string | undefined) | undefined {
  if (settings.regions.length === 0) return undefined;
  const { pinned } = settings;
  if (pinned !== undefined) return () => pinned;
  const byPlace = new Map<string, string>();
  for (const region of settings.regions) for (const place of region.serves) byPlace.set(place, region.name);
  return (facts) => {
    if (!facts) return undefined;
    const cf = facts as { colo?: unknown; continent?: unknown };
    const colo = typeof cf.colo === "string" ? byPlace.get(cf.colo) : undefined;
    return colo ?? (typeof cf.continent === "string" ? byPlace.get(cf.continent) : undefined);
  };
}
