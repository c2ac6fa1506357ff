/**
 * Which rules apply to a request: `match.methods`, `match.path`, `match.host`, and the request facts `ip`,
 * `country`, `asn` and `user_agent` (docs/lists.md), compiled once into predicates (docs/matching.md).
 * `match.list` (a live list) is the limiter's to check, as only it holds the lists. Path patterns: `*` matches any characters including `/`; `:name` matches one
 * segment (./pattern.ts, linear in the path). A rule matches a path in its canonical form (./path.ts) or as
 * sent, with or without one trailing slash: whatever spelling the client chose, an origin that reads it either
 * way is covered.
 */
import type { RuleConfig } from "../config";
import { type AddressBits, parsePrefix, type Prefix } from "../util/address";
import { IpSet } from "./ip-set";
import { compilePath, type PathMatcher } from "./pattern";

export { compilePath, type PathMatcher } from "./pattern";

/**
 * What a rule is matched against: the request's parsed URL, its path in canonical form (./path.ts), and the
 * methods it names besides its own (./method.ts).
 */
export interface RequestTarget {
  readonly url: URL;
  readonly path: string;
  readonly methodOverrides: readonly string[];
  /** The client's address (the trusted IP), for `match.ip`; absent or `undefined` = none known. */
  clientAddress?(): AddressBits | undefined;
  /** What Cloudflare knows of the request (`request.cf`), for `match.country` and `match.asn`. */
  readonly cf?: CfFacts | undefined;
  /** The `User-Agent` header, for `match.user_agent`. */
  readonly userAgent?: string | undefined;
}

/** The members of `request.cf` rules match on. */
export interface CfFacts {
  country?: unknown;
  asn?: unknown;
}

/** A rule with its match compiled. */
export interface CompiledRule {
  rule: RuleConfig;
  matches(method: string, target: RequestTarget): boolean;
}

/** A segment's `;name=value` parameters, which some origins drop before routing. */
const PATH_PARAMETERS = /;[^/]*/g;

/** Whether a request is one a `match` names (its `list` aside). */
export type MatchTest = (method: string, target: RequestTarget) => boolean;

/** Compiles every rule's `match` once (per isolate, or per middleware instance). */
export function compileRules(rules: readonly RuleConfig[]): CompiledRule[] {
  return rules.map((rule) => ({ rule, matches: compileMatch(rule.match) }));
}

/** Compiles one `match` (of a counting or an action rule). */
export function compileMatch(match: RuleConfig["match"]): MatchTest {
  // HEAD runs a GET's handler at most origins (Hono, Express, Go, Rails): a GET rule covers it too.
  const listed = match.methods;
  const methods = listed ? new Set(listed.includes("GET") ? [...listed, "HEAD"] : listed) : undefined;
  const overridable = match.method_override !== false;
  const path = match.path === undefined ? undefined : compilePathRule(match);
  const host = match.host === undefined ? undefined : compileHost(match.host);
  const facts = compileFacts(match);
  return (method, target) => {
    if (methods && !methods.has(method)) {
      if (!overridable || !target.methodOverrides.some((named) => methods.has(named))) return false;
    }
    if (host && !host(target.url)) return false;
    if (facts && !facts(target)) return false;
    if (path === undefined || path.test(target.path)) return true;
    // The path as sent, too: an origin that keeps `%2F` inside a segment (Hono) routes `/files/a%2Fb` to
    // `/files/:name`, and a pattern written with escapes matches only its own spelling. More is safe.
    if (target.path !== target.url.pathname && path.test(target.url.pathname)) return true;
    // And without path parameters: Tomcat, Spring and Jetty route `/api;a=1/x` to `/api/x`.
    return target.path.includes(";") && path.test(target.path.replace(PATH_PARAMETERS, ""));
  };
}

/**
 * `ip`, `country`, `asn` and `user_agent`, all of those given (each a list: any of its values), or `undefined`
 * when the match names none. A request without the fact (no trusted IP, no `request.cf` off Cloudflare, no
 * `User-Agent`) does not match: a rule for some clients never takes in the ones it cannot tell.
 */
function compileFacts(match: RuleConfig["match"]): ((target: RequestTarget) => boolean) | undefined {
  const tests: ((target: RequestTarget) => boolean)[] = [];
  if (match.ip) {
    const set = new IpSet();
    for (const entry of match.ip) set.add(parsePrefix(entry.trim()) as Prefix); // checked in src/config
    tests.push((target) => {
      const address = target.clientAddress?.();
      return address !== undefined && set.has(address, 0);
    });
  }
  if (match.country) {
    const countries = new Set(match.country);
    tests.push((target) => {
      const country = target.cf?.country;
      return typeof country === "string" && countries.has(country.toUpperCase());
    });
  }
  if (match.asn) {
    const asns = new Set(match.asn);
    tests.push((target) => {
      const asn = target.cf?.asn;
      return typeof asn === "number" && asns.has(asn);
    });
  }
  if (match.user_agent) {
    // Linear in the header's length whatever the pattern (./pattern.ts): a User-Agent is the client's to write.
    const globs = match.user_agent.map((glob) => compilePath(glob.toLowerCase(), { params: false }));
    tests.push((target) => {
      const agent = target.userAgent;
      if (agent === undefined) return false;
      const lower = agent.toLowerCase();
      return globs.some((glob) => glob.test(lower));
    });
  }
  if (tests.length === 0) return undefined;
  return (target) => tests.every((test) => test(target));
}

/**
 * A rule's path pattern with its options. Unless `strict_slash`, one trailing slash is no other path, on
 * either side: Express, ASP.NET Core and Rails route `/login/` to the handler of `/login`, so the pattern
 * `/login` (or `/login/`) matches both.
 */
function compilePathRule(match: RuleConfig["match"]): PathMatcher {
  return compilePath(match.path as string, {
    caseInsensitive: match.case_insensitive === true,
    optionalTrailingSlash: match.strict_slash !== true,
  });
}

/**
 * `api.example.com` (exact, case-insensitive), `*.example.com` (any subdomain); with `:port`, the port must
 * match too. A fully qualified name's trailing dot (`api.example.com.`, the same host) is not another host.
 */
function compileHost(pattern: string): (url: URL) => boolean {
  const wanted = pattern.toLowerCase();
  const withPort = wanted.includes(":");
  const hostOf = (url: URL): string => {
    const host = withPort ? url.host : url.hostname;
    return withPort ? host.replace(/\.(?=:\d*$)/, "") : host.endsWith(".") ? host.slice(0, -1) : host;
  };
  if (wanted.startsWith("*.")) {
    const suffix = wanted.slice(1);
    return (url) => hostOf(url).endsWith(suffix);
  }
  return (url) => hostOf(url) === wanted;
}
