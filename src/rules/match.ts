/**
 * Which rules apply to a request: `match.methods`, `match.path` and `match.host`, compiled once into
 * predicates (docs/matching.md). Path patterns: `*` matches any characters including `/`; `:name` matches one
 * segment (./pattern.ts, linear in the path). A rule matches a path in its canonical form (./path.ts) or as
 * sent, with or without one trailing slash: whatever spelling the client chose, an origin that reads it either
 * way is covered.
 */
import type { RuleConfig } from "../config";
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
}

/** A rule with its match compiled. */
export interface CompiledRule {
  rule: RuleConfig;
  matches(method: string, target: RequestTarget): boolean;
}

/** A segment's `;name=value` parameters, which some origins drop before routing. */
const PATH_PARAMETERS = /;[^/]*/g;

/** Compiles every rule's `match` once (per isolate, or per middleware instance). */
export function compileRules(rules: readonly RuleConfig[]): CompiledRule[] {
  return rules.map((rule) => {
    // HEAD runs a GET's handler at most origins (Hono, Express, Go, Rails): a GET rule covers it too.
    const listed = rule.match.methods;
    const methods = listed ? new Set(listed.includes("GET") ? [...listed, "HEAD"] : listed) : undefined;
    const overridable = rule.match.method_override !== false;
    const path = rule.match.path === undefined ? undefined : compilePathRule(rule.match);
    const host = rule.match.host === undefined ? undefined : compileHost(rule.match.host);
    return {
      rule,
      matches(method, target) {
        if (methods && !methods.has(method)) {
          if (!overridable || !target.methodOverrides.some((named) => methods.has(named))) return false;
        }
        if (host && !host(target.url)) return false;
        if (path === undefined || path.test(target.path)) return true;
        // The path as sent, too: an origin that keeps `%2F` inside a segment (Hono) routes `/files/a%2Fb` to
        // `/files/:name`, and a pattern written with escapes matches only its own spelling. More is safe.
        if (target.path !== target.url.pathname && path.test(target.url.pathname)) return true;
        // And without path parameters: Tomcat, Spring and Jetty route `/api;a=1/x` to `/api/x`.
        return target.path.includes(";") && path.test(target.path.replace(PATH_PARAMETERS, ""));
      },
    };
  });
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
