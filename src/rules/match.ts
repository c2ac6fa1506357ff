/**
 * Which rules apply to a request: `match.methods`, `match.path` and `match.host`, compiled once into
 * predicates. Path patterns: `*` matches any characters including `/`; `:name` matches one segment. A rule
 * matches a path in its canonical form (./path.ts) or as sent: whatever spelling the client chose, an origin
 * that reads it either way is covered.
 */
import type { RuleConfig } from "../config";

/** What a rule is matched against: the request's parsed URL, and its path in canonical form (./path.ts). */
export interface RequestTarget {
  readonly url: URL;
  readonly path: string;
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
    const path = rule.match.path === undefined ? undefined : compilePath(rule.match.path);
    const host = rule.match.host === undefined ? undefined : compileHost(rule.match.host);
    return {
      rule,
      matches(method, target) {
        if (methods && !methods.has(method)) return false;
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

/** `/api/*` → `^/api/.*$`, `/users/:id` → `^/users/[^/]+$`; everything else is literal. */
export function compilePath(pattern: string): RegExp {
  let source = "";
  for (const token of pattern.split(/(\*|:[A-Za-z_][A-Za-z0-9_]*)/)) {
    if (token === "*") source += ".*";
    else if (token.startsWith(":") && token.length > 1) source += "[^/]+";
    else source += token.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${source}$`);
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
