/**
 * Client IPs: read from the ONE trusted header only (never `X-Forwarded-For` / `X-Real-IP` unless that is
 * the configured header), canonicalised so that different spellings of one address share a bucket, and
 * grouped by /64 for `ip/64` (one IPv6 host usually owns a whole /64 and could rotate through it).
 */
import { BoundedMap } from "../util/bounded-map";

/** The identity used when the trusted header is absent: one shared bucket, never unlimited. */
export const UNKNOWN_IP = "unknown";

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Parses an IPv4 address into its 4 bytes, or `undefined`. One regex: it runs on every request. */
function parseIPv4(text: string): number[] | undefined {
  const match = IPV4.exec(text);
  if (!match) return undefined;
  const bytes = [Number(match[1]), Number(match[2]), Number(match[3]), Number(match[4])];
  return bytes.every((b) => b <= 255) ? bytes : undefined;
}

/** Parses an IPv6 address (with `::`, an IPv4 tail, brackets or a zone) into 8 16-bit groups, or `undefined`. */
function parseIPv6(text: string): number[] | undefined {
  let address = text.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  const withV4 = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  if (withV4) {
    const [a = 0, b = 0, c = 0, d = 0] = parseIPv4(withV4[2] ?? "") ?? [];
    if (!parseIPv4(withV4[2] ?? "")) return undefined;
    address = `${withV4[1]}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = address.split("::");
  if (halves.length > 2) return undefined;
  const head = halves[0] ? halves[0].split(":") : [];
  const rest = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const groups = [...head, ...new Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...rest];
  if (!groups.every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return undefined;
  return groups.map((g) => Number.parseInt(g, 16));
}

/** RFC 5952 text form: lower case, no leading zeros, the longest run of zero groups (≥2) as `::`. */
function formatIPv6(groups: readonly number[]): string {
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < groups.length; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < groups.length && groups[j] === 0) j++;
    if (j - i > bestLength) [bestStart, bestLength] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(":");
  return `${hex.slice(0, bestStart).join(":")}::${hex.slice(bestStart + bestLength).join(":")}`;
}

/** An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4 client it carries. */
function mappedIPv4(groups: readonly number[]): string | undefined {
  if (groups.slice(0, 5).some((g) => g !== 0) || groups[5] !== 0xffff) return undefined;
  const [hi = 0, lo = 0] = groups.slice(6);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** The canonical text of an address; anything that is not an IP is returned trimmed, unchanged. */
export function canonicalIp(text: string): string {
  const trimmed = text.trim();
  const v4 = parseIPv4(trimmed);
  if (v4) return v4.join(".");
  const v6 = parseIPv6(trimmed);
  if (!v6) return trimmed;
  return mappedIPv4(v6) ?? formatIPv6(v6);
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
