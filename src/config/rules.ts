/**
 * Validates rules (from `RATE_LIMIT_RULES` or `rateLimit({ rules })`) and resolves their defaults once,
 * into the `RuleConfig` every later stage reads. Nothing here runs per request.
 */
import * as v from "valibot";
import type { Algorithm, FailurePolicy, Mode } from "../engine/types";
import { ConfigError, configErrorFrom } from "./errors";
import { ruleSchema } from "./schema";

/** One part of a key (or tier) source. */
export type KeyPart =
  | { kind: "ip" }
  | { kind: "ip64" }
  | { kind: "global" }
  | { kind: "header"; name: string }
  | { kind: "query"; name: string }
  | { kind: "jwt"; claim: string };

/** Per-tier values; absent fields fall back to the rule's own. */
export interface TierLimits {
  limit?: number;
  periodMs?: number;
  burst?: number;
}

/** A validated rule with every default applied. */
export interface RuleConfig {
  name: string;
  match: { methods?: string[]; path?: string; host?: string };
  /** The key's parts; more than one = a composite identity. */
  key: KeyPart[];
  /** The key as written (`"header:x-api-key"`, `"ip|jwt:sub"`), for messages. */
  keyText: string;
  algorithm: Algorithm;
  limit: number;
  /** Window length; for `concurrency`, the slot lease (when an unreleased slot is freed). */
  periodMs: number;
  burst: number;
  cost: { kind: "units"; units: number } | { kind: "header"; name: string };
  tier?: KeyPart[];
  tiers: Record<string, TierLimits>;
  /** Per-rule override of the global mode; `undefined` = follow the global mode. */
  mode?: Mode;
  failure?: FailurePolicy;
  missing: "ip" | "skip" | "deny";
  /** `false`: never decided from a lease (README "Leases"); concurrency rules never are. */
  lease: boolean;
}

/** The limits one request gets under a rule. */
export interface EffectiveLimits {
  /** The tier these come from; `undefined` = the rule's own (no tier, or one the rule does not name). */
  tier: string | undefined;
  limit: number;
  periodMs: number;
  burst: number;
}

/**
 * The one tier resolver, shared by the limiter and the admin API: a named tier's own `limit` / `period` /
 * `burst` where it sets them (its `burst` defaulting to its `limit`), the rule's elsewhere; an unknown or
 * absent tier gets the rule's own.
 */
export function limitsFor(rule: RuleConfig, tierName: string | undefined): EffectiveLimits {
  const tier =
    tierName !== undefined && Object.hasOwn(rule.tiers, tierName) ? rule.tiers[tierName] : undefined;
  if (tier === undefined) {
    return { tier: undefined, limit: rule.limit, periodMs: rule.periodMs, burst: rule.burst };
  }
  return {
    tier: tierName,
    limit: tier.limit ?? rule.limit,
    periodMs: tier.periodMs ?? rule.periodMs,
    burst: tier.burst ?? tier.limit ?? rule.burst,
  };
}

/** Default slot lease of a `concurrency` rule: when a slot held by a request that never finished is freed. */
export const DEFAULT_SLOT_LEASE_MS = 60_000;

/** Options that change what a valid rule is. */
export interface ParseRulesOptions {
  /** Names the source in messages: `RATE_LIMIT_RULES` for the Worker, `rules` for the middleware. */
  label: string;
  /** Whether `jwt:<claim>` keys can be verified (a secret or a JWKS URL is configured). */
  jwtVerifiable: boolean;
}

/** Validates rules and applies defaults; throws a `ConfigError` naming the first wrong fields. */
export function parseRules(input: unknown, { label, jwtVerifiable }: ParseRulesOptions): RuleConfig[] {
  if (!Array.isArray(input)) {
    throw new ConfigError(`${label}: expected an array of rules (a TOML array of tables, or a JSON array)`);
  }
  if (input.length === 0) throw new ConfigError(`${label}: no rules; add at least one`);
  const result = v.safeParse(v.array(ruleSchema), input);
  if (!result.success) throw configErrorFrom(label, result.issues);

  const seen = new Map<string, number>();
  return result.output.map((rule, index) => {
    const at = `${label}[${index}]`;
    const first = seen.get(rule.name);
    if (first !== undefined)
      throw new ConfigError(`${at}.name: "${rule.name}" is already used by ${label}[${first}]`);
    seen.set(rule.name, index);

    const key = parseKey(rule.key);
    const tier = rule.tier === undefined ? undefined : parseKey(rule.tier);
    if (!jwtVerifiable) {
      for (const [field, parts] of [
        ["key", key],
        ["tier", tier ?? []],
      ] as const) {
        const jwt = parts.find((part) => part.kind === "jwt");
        if (jwt) {
          throw new ConfigError(
            `${at}.${field}: "jwt:${jwt.claim}" needs ${label === "RATE_LIMIT_RULES" ? "RATE_LIMIT_JWT_SECRET or RATE_LIMIT_JWKS_URL" : "jwt.secret or jwt.jwksUrl"} (unverified claims are forgeable)`,
          );
        }
      }
    }
    if ((rule.tiers === undefined) !== (rule.tier === undefined)) {
      throw new ConfigError(
        `${at}.${rule.tier === undefined ? "tiers" : "tier"}: "tier" and "tiers" go together`,
      );
    }
    if (rule.period === undefined && rule.algorithm !== "concurrency") {
      throw new ConfigError(`${at}.period: required for ${rule.algorithm} (e.g. "1m")`);
    }
    const cost: RuleConfig["cost"] =
      typeof rule.cost === "string"
        ? { kind: "header", name: rule.cost.slice("header:".length) }
        : { kind: "units", units: rule.cost ?? 1 };
    const tiers: Record<string, TierLimits> = {};
    for (const [tierName, limits] of Object.entries(rule.tiers ?? {})) {
      tiers[tierName] = { limit: limits.limit, periodMs: limits.period, burst: limits.burst };
    }
    return {
      name: rule.name,
      match: rule.match ?? {},
      key,
      keyText: Array.isArray(rule.key) ? rule.key.join("|") : rule.key,
      algorithm: rule.algorithm,
      limit: rule.limit,
      periodMs: rule.period ?? DEFAULT_SLOT_LEASE_MS,
      burst: rule.burst ?? rule.limit,
      cost,
      tier,
      tiers,
      mode: rule.mode,
      failure: rule.failure,
      missing: rule.missing ?? "ip",
      lease: rule.lease ?? true,
    } satisfies RuleConfig;
  });
}

/** `"header:X-Api-Key"` → `{ kind: "header", name: "x-api-key" }`; arrays → composite parts. */
export function parseKey(source: string | readonly string[]): KeyPart[] {
  return (typeof source === "string" ? [source] : source).map(parseKeyPart);
}

function parseKeyPart(source: string): KeyPart {
  if (source === "ip") return { kind: "ip" };
  if (source === "ip/64") return { kind: "ip64" };
  if (source === "global") return { kind: "global" };
  const colon = source.indexOf(":");
  const kind = source.slice(0, colon);
  const name = source.slice(colon + 1);
  if (kind === "header") return { kind, name: name.toLowerCase() };
  if (kind === "query") return { kind, name };
  return { kind: "jwt", claim: name };
}
