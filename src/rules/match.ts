/**
 * Which rules apply to a request: `match.methods`, `match.path` and `match.host`, compiled once into
 * predicates. Path patterns: `*` matches any characters including `/`; `:name` matches one segment. A path is
 * tested in its canonical form (./path.ts), whatever the spelling the client chose.
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

/** Compiles every rule's `match` once (per isolate, or per middleware instance). */
export function compileRules(rules: readonly RuleConfig[]): CompiledRule[] {
  return rules.map((rule) => {
    const methods = rule.match.methods ? new Set(rule.match.methods) : undefined;
    const path = rule.match.path === undefined ? undefined : compilePath(rule.match.path);
    const host = rule.match.host === undefined ? undefined : compileHost(rule.match.host);
    return {
      rule,
      matches(method, target) {
        if (methods && !methods.has(method)) return false;
        if (host && !host(target.url)) return false;
        return path === undefined || path.test(target.path);
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

/** `api.example.com` (exact, case-insensitive), `*.example.com` (any subdomain); with `:port`, the port must match too. */
function compileHost(pattern: string): (url: URL) => boolean {
  const wanted = pattern.toLowerCase();
  const withPort = wanted.includes(":");
  if (wanted.startsWith("*.")) {
    const suffix = wanted.slice(1);
    return (url) => (withPort ? url.host : url.hostname).endsWith(suffix);
  }
  return (url) => (withPort ? url.host : url.hostname) === wanted;
}
