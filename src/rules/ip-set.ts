/**
 * A set of IP addresses and CIDR prefixes (`match.ip`, a live list's IP entries: docs/lists.md), asked
 * "does any entry hold this address?" in time independent of how many entries it has.
 *
 * One hash table per prefix length in use, keyed by the network (the address's first `length` bits): an
 * address is looked up once per length present (at most 33 for IPv4, 129 for IPv6; a real list uses a
 * handful), each lookup one `Map.get`. A sorted array would cost log₂(n) comparisons per length and a binary
 * trie up to 128 node hops; tables also take entries one by one, so a list can be built in slices between
 * which requests run (src/live/lists.ts). Each entry may expire (`expiresAtMs`; 0 = never).
 */
import { type AddressBits, maskWords, type Prefix } from "../util/address";

/** The networks of one prefix length: IPv4 keyed by the network's one word, IPv6 by its words' text. */
type Networks = Map<number, number> | Map<string, number>;

/** One address family's tables. */
interface Family {
  /** Prefix length → networks → expiry (ms, 0 = never). */
  tables: Map<number, Networks>;
  /** The lengths in use, longest first. */
  lengths: number[];
}

/** The key of a network in its table: IPv4's word as it is, IPv6's first ⌈length/32⌉ words as text. */
function keyOf(words: readonly number[], v6: boolean, length: number): number | string {
  if (!v6) return words[0] as number;
  let key = String(words[0]);
  for (let i = 1; i * 32 < length; i++) key += `,${words[i]}`;
  return key;
}

/** Addresses and prefixes, each possibly expiring. */
export class IpSet {
  private readonly v4: Family = { tables: new Map(), lengths: [] };
  private readonly v6: Family = { tables: new Map(), lengths: [] };
  /** How many distinct networks it holds (an entry added twice counts once). */
  size = 0;

  /** Adds one prefix (its host bits zero), expiring at `expiresAtMs` (0 = never); the later expiry wins. */
  add(prefix: Prefix, expiresAtMs = 0): void {
    const family = prefix.v6 ? this.v6 : this.v4;
    let table = family.tables.get(prefix.length) as Map<number | string, number> | undefined;
    if (table === undefined) {
      table = new Map();
      family.tables.set(prefix.length, table as Networks);
      family.lengths = [...family.tables.keys()].sort((a, b) => b - a);
    }
    const key = keyOf(prefix.words, prefix.v6, prefix.length);
    const known = table.get(key);
    if (known === undefined) this.size++;
    else if (known === 0 || (expiresAtMs !== 0 && known >= expiresAtMs)) return;
    table.set(key, expiresAtMs);
  }

  /** Sets one prefix's expiry to `expiresAtMs` (0 = never), adding it when absent: a live list's edit. */
  set(prefix: Prefix, expiresAtMs: number): void {
    this.delete(prefix);
    this.add(prefix, expiresAtMs);
  }

  /** Removes one prefix (an entry holding it under another length stays). */
  delete(prefix: Prefix): void {
    const family = prefix.v6 ? this.v6 : this.v4;
    const table = family.tables.get(prefix.length) as Map<number | string, number> | undefined;
    if (table === undefined || !table.delete(keyOf(prefix.words, prefix.v6, prefix.length))) return;
    this.size--;
    if (table.size > 0) return;
    // An empty table would cost every lookup one more Map.get.
    family.tables.delete(prefix.length);
    family.lengths = [...family.tables.keys()].sort((a, b) => b - a);
  }

  /** Whether an entry holds `address` and has not expired by `nowMs`. */
  has(address: AddressBits, nowMs: number): boolean {
    const family = address.v6 ? this.v6 : this.v4;
    const word = address.words[0] as number;
    for (const length of family.lengths) {
      const table = family.tables.get(length) as Map<number | string, number>;
      // IPv4 (every request from an IPv4 client): the network in one masking, no array.
      const key = address.v6
        ? keyOf(maskWords(address.words, length), true, length)
        : length === 0
          ? 0
          : (word & (~0 << (32 - length))) >>> 0;
      const expiresAtMs = table.get(key);
      if (expiresAtMs !== undefined && (expiresAtMs === 0 || expiresAtMs > nowMs)) return true;
    }
    return false;
  }
}
