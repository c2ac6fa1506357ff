/**
 * IP addresses and CIDR prefixes as numbers: the parsers the client IP (src/identity/ip.ts), the `match.ip`
 * field and live lists (docs/lists.md) share. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4
 * address it carries, so one client is one entry however its address was written.
 */

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

/** Parses an IPv4 address into its 4 bytes, or `undefined`. One regex: it runs on every request. */
export function parseIPv4(text: string): number[] | undefined {
  const match = IPV4.exec(text);
  if (!match) return undefined;
  const bytes = [Number(match[1]), Number(match[2]), Number(match[3]), Number(match[4])];
  return bytes.every((b) => b <= 255) ? bytes : undefined;
}

/** Parses an IPv6 address (with `::`, an IPv4 tail, brackets or a zone) into 8 16-bit groups, or `undefined`. */
export function parseIPv6(text: string): number[] | undefined {
  let address = text.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  const withV4 = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  if (withV4) {
    const v4 = parseIPv4(withV4[2] ?? "");
    if (!v4) return undefined;
    const [a = 0, b = 0, c = 0, d = 0] = v4;
    address = `${withV4[1]}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = address.split("::");
  if (halves.length > 2) return undefined;
  const head = halves[0] ? halves[0].split(":") : [];
  const rest = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const groups = [...head, ...new Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...rest];
  if (!groups.every((g) => HEX_GROUP.test(g))) return undefined;
  return groups.map((g) => Number.parseInt(g, 16));
}

/** The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) carries, as 4 bytes; else `undefined`. */
export function mappedIPv4(groups: readonly number[]): number[] | undefined {
  if (groups.slice(0, 5).some((g) => g !== 0) || groups[5] !== 0xffff) return undefined;
  const [hi = 0, lo = 0] = groups.slice(6);
  return [hi >> 8, hi & 255, lo >> 8, lo & 255];
}

/**
 * An address as 32-bit words: one for IPv4 (a mapped IPv6 address included), four for IPv6. Each word is an
 * unsigned integer (0..2³²−1).
 */
export interface AddressBits {
  v6: boolean;
  words: number[];
}

const bytesToWord = (a: number, b: number, c: number, d: number): number =>
  ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;

/** The bits of an address, or `undefined` when `text` is not one. */
export function addressBits(text: string): AddressBits | undefined {
  const v4 = parseIPv4(text);
  if (v4) return { v6: false, words: [bytesToWord(...(v4 as [number, number, number, number]))] };
  const v6 = parseIPv6(text);
  if (!v6) return undefined;
  const mapped = mappedIPv4(v6);
  if (mapped) return { v6: false, words: [bytesToWord(...(mapped as [number, number, number, number]))] };
  const words: number[] = [];
  for (let i = 0; i < 8; i += 2) words.push((((v6[i] as number) << 16) | (v6[i + 1] as number)) >>> 0);
  return { v6: true, words };
}

/** A network: its address bits (host bits zero) and its prefix length (0..32 for IPv4, 0..128 for IPv6). */
export interface Prefix extends AddressBits {
  length: number;
}

/** `words` with every bit after the first `length` cleared. */
export function maskWords(words: readonly number[], length: number): number[] {
  return words.map((word, i) => {
    const keep = Math.min(32, Math.max(0, length - 32 * i));
    return keep === 0 ? 0 : keep === 32 ? word : (word & (~0 << (32 - keep))) >>> 0;
  });
}

/**
 * An address (`203.0.113.7`, a whole-address prefix) or a CIDR (`203.0.113.0/24`, `2001:db8::/32`), or the
 * reason it is neither. An IPv4-mapped prefix (`::ffff:203.0.113.0/120`) is its IPv4 form (`/24`). A CIDR with
 * host bits set (`203.0.113.7/24`) is refused: it is most likely a typo, and its network is named.
 */
export function parsePrefix(text: string): Prefix | string {
  const slash = text.indexOf("/");
  const address = slash === -1 ? text : text.slice(0, slash);
  const bits = addressBits(address);
  if (!bits) return `${JSON.stringify(text.slice(0, 80))} is not an IP address or CIDR`;
  const written = parseIPv6(address);
  const mapped = !bits.v6 && written !== undefined; // written as IPv6, carrying IPv4
  const max = bits.v6 || mapped ? 128 : 32;
  let length = max;
  if (slash !== -1) {
    const suffix = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(suffix) || Number(suffix) > max) {
      return `${JSON.stringify(text.slice(0, 80))} has no valid prefix length (0..${max} after "/")`;
    }
    length = Number(suffix);
  }
  if (mapped) {
    if (length < 96)
      return `${JSON.stringify(text.slice(0, 80))} is wider than the IPv4-mapped range (::ffff:0:0/96)`;
    length -= 96;
  }
  const network = maskWords(bits.words, length);
  if (network.some((word, i) => word !== bits.words[i])) {
    return `${JSON.stringify(text.slice(0, 80))} has host bits set (the network is ${formatPrefix({ v6: bits.v6, words: network, length })})`;
  }
  return { v6: bits.v6, words: network, length };
}

/** The canonical text of a prefix: `203.0.113.0/24`, `2001:db8::/32`; a whole address without its `/32` / `/128`. */
export function formatPrefix(prefix: Prefix): string {
  const address = prefix.v6 ? formatIPv6Words(prefix.words) : formatIPv4Word(prefix.words[0] as number);
  return prefix.length === (prefix.v6 ? 128 : 32) ? address : `${address}/${prefix.length}`;
}

const formatIPv4Word = (word: number): string =>
  `${word >>> 24}.${(word >>> 16) & 255}.${(word >>> 8) & 255}.${word & 255}`;

function formatIPv6Words(words: readonly number[]): string {
  const groups: number[] = [];
  for (const word of words) groups.push(word >>> 16, word & 0xffff);
  return formatIPv6(groups);
}

/** RFC 5952 text form: lower case, no leading zeros, the longest run of zero groups (≥2) as `::`. */
export function formatIPv6(groups: readonly number[]): string {
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
