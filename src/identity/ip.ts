/**
 * Client IPs: read from the ONE trusted header only (never `X-Forwarded-For` / `X-Real-IP` unless that is
 * the configured header), canonicalised so that different spellings of one address share a bucket, and
 * grouped by /64 for `ip/64` (one IPv6 host usually owns a whole /64 and could rotate through it).
 */
import { formatIPv6, mappedIPv4, parseIPv4, parseIPv6 } from "../util/address";
import { BoundedMap } from "../util/bounded-map";

/** The identity used when the trusted header is absent: one shared bucket, never unlimited. */
export const UNKNOWN_IP = "unknown";

/** The canonical text of an address; anything that is not an IP is returned trimmed, unchanged. */
export function canonicalIp(text: string): string {
  const trimmed = text.trim();
  const v4 = parseIPv4(trimmed);
  if (v4) return v4.join(".");
  const v6 = parseIPv6(trimmed);
  if (!v6) return trimmed;
  return mappedIPv4(v6)?.join(".") ?? formatIPv6(v6);
}

/** `ip/64`: IPv6 → its canonical /64 prefix (`2001:db8:1:2::/64`); IPv4 (and non-IPs) whole. */
export function ipPrefix64(text: string): string {
  const trimmed = text.trim().replace(/\/64$/, "");
  const v6 = parseIPv4(trimmed) ? undefined : parseIPv6(trimmed);
  if (!v6 || mappedIPv4(v6)) return canonicalIp(trimmed);
  return `${formatIPv6([...v6.slice(0, 4), 0, 0, 0, 0])}/64`;
}

/**
 * Recent header values' client IPs, per isolate: a client sends many requests, each parsed once (the
 * request's `RequestFacts` keeps it). Bounded; oldest out first.
 */
const RECENT_IP_ENTRIES = 1024;
const recentIps = new BoundedMap<string, string>(RECENT_IP_ENTRIES);
const RECENT_IP_MAX_LENGTH = 128;

/** The client IP from the trusted header, or `undefined` when the header is absent. */
export function clientIpFrom(headers: Headers, trustedHeader: string): string | undefined {
  const raw = headers.get(trustedHeader);
  if (raw === null) return undefined;
  const known = recentIps.get(raw);
  if (known !== undefined) return known;
  const value = raw.trim();
  if (!value) return undefined;
  // A chained value (the trusted header is X-Forwarded-For behind a known proxy): that proxy appends the
  // address it saw, last; every entry before it is whatever the client sent.
  const ip = canonicalIp(value.slice(value.lastIndexOf(",") + 1));
  if (raw.length <= RECENT_IP_MAX_LENGTH) recentIps.set(raw, ip);
  return ip;
}
