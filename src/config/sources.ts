/**
 * Where a rule reads a request: its key (and tier, and shed priority) sources, its settle source, and the
 * request headers all of them read. Parsed from strings the schema (./schema.ts) has already checked.
 */
import type { KeyPart, RuleConfig, SettleSource } from "./rule-config";
import type { CfField } from "./source-fields";

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
  if (kind === "query" || kind === "cookie") return { kind, name };
  if (kind === "cf") return { kind, field: name as CfField };
  return { kind: "jwt", claim: name };
}

/** `"sse:usage.total_tokens"` → `{ kind: "sse", path: ["usage", "total_tokens"] }` (the schema checked it). */
export function settleSource(text: string): SettleSource {
  const colon = text.indexOf(":");
  const kind = text.slice(0, colon);
  const rest = text.slice(colon + 1);
  if (kind === "header") return { kind, name: rest.toLowerCase(), text };
  return { kind: kind === "json" ? "json" : "sse", path: rest.split("."), text };
}

/**
 * The request headers the rules read (keys, tiers, costs, shed priorities), lower-case: the proxy sends each
 * to the origin as the one value that was counted.
 */
export function headersRead(rules: readonly RuleConfig[]): string[] {
  const names = new Set<string>();
  for (const rule of rules) {
    const priority = rule.shed?.priority;
    const parts = [...rule.key, ...(rule.tier ?? []), ...(Array.isArray(priority) ? priority : [])];
    for (const part of parts) if (part.kind === "header") names.add(part.name);
    if (rule.cost.kind === "header") names.add(rule.cost.name.toLowerCase());
  }
  return [...names];
}
