/**
 * What check-config warns of and the limiter logs, in rules that are valid: fields never read, and a tier or
 * shed priority the client chooses.
 */
import { isAlgorithm, namesWith, traitsOf } from "../engine/algorithms";
import type { RuleConfig } from "./rule-config";

/**
 * Fields of valid rules that are never read: a `burst` (the rule's or a tier's) where the algorithm takes none,
 * a `cost` on a rule of one slot per request (`AlgorithmTraits`), a path option with no path,
 * `method_override` with no methods. Not errors, as the rule syntax allows them; check-config warns of each.
 */
export function unreadFields(rules: readonly unknown[], label: string): string[] {
  const unread: string[] = [];
  rules.forEach((raw, index) => {
    const rule = raw as {
      algorithm?: string;
      burst?: unknown;
      cost?: unknown;
      tiers?: Record<string, object>;
      match?: Record<string, unknown>;
    };
    const at = `${label}[${index}]`;
    const match = rule.match ?? {};
    for (const field of ["strict_slash", "case_insensitive"]) {
      if (match[field] !== undefined && match.path === undefined) {
        unread.push(`${at}.match.${field}: ignored, the rule has no path`);
      }
    }
    if (match.method_override !== undefined && match.methods === undefined) {
      unread.push(`${at}.match.method_override: ignored, the rule names no methods`);
    }
    const traits = isAlgorithm(rule.algorithm) ? traitsOf(rule.algorithm) : undefined;
    if (traits && !traits.takesBurst) {
      const tiers = Object.entries(rule.tiers ?? {}).filter(([, limits]) => "burst" in limits);
      for (const where of [...(rule.burst === undefined ? [] : [""]), ...tiers.map(([t]) => `.tiers.${t}`)]) {
        unread.push(`${at}${where}.burst: ignored, only ${namesWith("takesBurst")} rules have a burst`);
      }
    }
    if (traits && !traits.takesCost && rule.cost !== undefined) {
      unread.push(`${at}.cost: ignored, a ${rule.algorithm} rule holds one slot per request`);
    }
  });
  return unread;
}

/**
 * Where a rule lets the client choose what it gets: a `tier` or a shed `priority` read from a header or a query
 * parameter, which any client sets to whatever it likes (the best tier, the class never shed). Valid, as a
 * trusted upstream may set them; check-config warns of each, and the limiter logs each once
 * (docs/security.md: take them from a verified `jwt:` claim).
 */
export function clientChosenSources(rules: readonly RuleConfig[]): string[] {
  const notes: string[] = [];
  for (const rule of rules) {
    const priority = rule.shed?.priority;
    for (const [field, parts, gets] of [
      ["tier", rule.tier ?? [], "its own tier"],
      ["priority", Array.isArray(priority) ? priority : [], "its own priority class, one never shed"],
    ] as const) {
      const chosen = parts.find(
        (part) => part.kind === "header" || part.kind === "query" || part.kind === "cookie",
      );
      if (chosen === undefined || !("name" in chosen)) continue;
      notes.push(
        `rule "${rule.name}" takes its ${field} from "${chosen.kind}:${chosen.name}", which the client sends: any client can pick ${gets}, unless a proxy you trust sets it (take it from a verified jwt:<claim> instead; docs/security.md)`,
      );
    }
  }
  return notes;
}
