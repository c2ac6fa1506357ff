/**
 * Live lists (docs/lists.md): sets of addresses, CIDRs and hashed identities an operator edits through the
 * admin API while the Worker runs, and rules read with `match.list`.
 *
 * In Redis: one sorted set per list at `<prefix>:list:{<name>}`, member = the entry's canonical text
 * (`203.0.113.0/24`, `2001:db8::1`, `hash:<hashed identity>`), score = when it expires (ms, Redis time) or
 * `+inf`; and the list's version, field `list:<name>` of the live-mode hash, raised by every write.
 *
 * In each isolate: a copy of every list its rules read, matched without Redis. The list's version comes with
 * the once-a-second read of the live modes (src/live/modes.ts), so an edit is seen everywhere within about a
 * second; the isolate then reads the list's change log (list-log.ts) and applies the edits made since its copy,
 * in one Redis call whatever the list's size. Where the log cannot say (a replace, a delete, more writes missed
 * than it keeps), the list is read again in the background, a page at a time, and replaces the old copy only
 * once it is whole. No request ever waits for a list: until an isolate holds a list, it holds nobody (a deny list
 * denies no one, an allow list exempts no one: every request goes on to the counting rules).
 */
import type { RedisPort } from "../engine/redis";
import type { WaitUntil } from "../engine/types";
import { IpSet } from "../rules/ip-set";
import { type AddressBits, parsePrefix } from "../util/address";
import { editsSince, LIST_LOG_FIRST_READ, LIST_LOG_ITEMS, listLogKey, parseLogItem } from "./list-log";
import { type LiveModes, liveModeKey, listVersionField } from "./modes";

/** The Redis key of one live list (a hash tag: a list's keys share one Redis Cluster slot). */
export const listKey = (prefix: string, name: string): string => `${prefix}:list:{${name}}`;

/** How an identity entry is written: its hashed form after this prefix (src/engine/keys.ts `hashIdentity`). */
export const IDENTITY_ENTRY = "hash:";

/** Entries read from Redis in one page of a load. */
export const LIST_PAGE = 5000;

/** After a failed load, how long an isolate waits before it tries again, ms. */
const RETRY_AFTER_MS = 1000;

/** One list as an isolate holds it. */
interface HeldList {
  version: number;
  /** The newest change-log item it holds (list-log.ts); undefined: none (the list was never logged). */
  logId: string | undefined;
  addresses: IpSet;
  /** Hashed identity → when it expires (ms, Redis time; 0 = never). */
  identities: Map<string, number>;
}

/** How an isolate's lists are read. */
export interface LiveListsOptions {
  /** Entries per page. @default LIST_PAGE */
  pageSize?: number;
  /** Clock, ms. @default Date.now */
  now?: () => number;
}

/** The isolate's copy of the live lists its rules read. */
export class LiveLists {
  private readonly held = new Map<string, HeldList>();
  /** Lists being read, and until when a failed read is not tried again (ms). */
  private readonly loading = new Set<string>();
  private readonly retryAt = new Map<string, number>();
  /** Redis time minus this isolate's clock, ms: entries expire by Redis time. */
  private clockOffsetMs = 0;
  private readonly pageSize: number;
  private readonly now: () => number;

  /**
   * @param names the lists the rules read (`match.list`); others are never loaded
   */
  constructor(
    private readonly redis: RedisPort,
    private readonly prefix: string,
    readonly names: readonly string[],
    options: LiveListsOptions = {},
  ) {
    this.pageSize = options.pageSize ?? LIST_PAGE;
    this.now = options.now ?? Date.now;
  }

  /**
   * Starts a background read (`waitUntil`) of every list whose version in `live` is newer than the copy held.
   * Costs a few comparisons when nothing moved.
   */
  sync(live: LiveModes, waitUntil: WaitUntil): void {
    const versions = live.lists;
    if (versions === undefined) return;
    for (const name of this.names) {
      const wanted = versions[name] ?? 0;
      if (wanted <= (this.held.get(name)?.version ?? 0)) continue;
      this.load(name, waitUntil);
    }
  }

  /**
   * Brings one list up to date now, in the background (after this isolate wrote it): the edits since its copy
   * from the change log, or the whole list when the log cannot say or no copy is held.
   */
  load(name: string, waitUntil: WaitUntil): void {
    if (!this.names.includes(name) || this.loading.has(name)) return;
    if ((this.retryAt.get(name) ?? 0) > this.now()) return;
    this.loading.add(name);
    const held = this.held.get(name);
    waitUntil(
      (held ? this.update(name, held) : Promise.resolve(false))
        .then((updated) => (updated ? undefined : this.read(name)))
        .then((list) => {
          if (list && list.version >= (this.held.get(name)?.version ?? 0)) this.held.set(name, list);
          this.retryAt.delete(name);
        })
        .catch(() => {
          this.retryAt.set(name, this.now() + RETRY_AFTER_MS);
        })
        .finally(() => this.loading.delete(name)),
    );
  }

  /** Whether the list holds an address or CIDR entry containing `address` (and it has not expired). */
  holdsAddress(name: string, address: AddressBits): boolean {
    const list = this.held.get(name);
    return list !== undefined && list.addresses.size > 0 && list.addresses.has(address, this.redisNow());
  }

  /** Whether the list has identity entries. */
  holdsIdentities(name: string): boolean {
    return (this.held.get(name)?.identities.size ?? 0) > 0;
  }

  /** Whether the list holds this hashed identity (and it has not expired). */
  holdsIdentity(name: string, identityHash: string): boolean {
    const expiresAtMs = this.held.get(name)?.identities.get(identityHash);
    return expiresAtMs !== undefined && (expiresAtMs === 0 || expiresAtMs > this.redisNow());
  }

  /** The version of the list this isolate holds (0: none, or never written). */
  versionOf(name: string): number {
    return this.held.get(name)?.version ?? 0;
  }

  private redisNow(): number {
    return this.now() + this.clockOffsetMs;
  }

  /**
   * Applies the edits logged since `held`'s copy to it, in place; false when the list must be read whole. The
   * version is read before the log: every write it counts has logged its item by then (the script logs it,
   * the version is raised after).
   */
  private async update(name: string, held: HeldList): Promise<boolean> {
    const versionRead = ["hget", liveModeKey(this.prefix), listVersionField(name)] as const;
    const log = listLogKey(this.prefix, name);
    let [seen, items] = await this.redis.pipeline([versionRead, ["lrange", log, 0, LIST_LOG_FIRST_READ - 1]]);
    let newest = Array.isArray(items) ? items : [];
    let edits = editsSince(held.logId, newest);
    if (edits === undefined && newest.length === LIST_LOG_FIRST_READ) {
      [seen, items] = await this.redis.pipeline([versionRead, ["lrange", log, 0, LIST_LOG_ITEMS - 1]]);
      newest = Array.isArray(items) ? items : [];
      edits = editsSince(held.logId, newest);
    }
    if (edits === undefined) return false;
    for (const edit of edits) {
      if (edit.member.startsWith(IDENTITY_ENTRY)) {
        const hash = edit.member.slice(IDENTITY_ENTRY.length);
        if ("removed" in edit) held.identities.delete(hash);
        else held.identities.set(hash, edit.expiresAtMs);
        continue;
      }
      const prefix = parsePrefix(edit.member);
      if (typeof prefix === "string") continue; // written checked: never a string
      if ("removed" in edit) held.addresses.delete(prefix);
      else held.addresses.set(prefix, edit.expiresAtMs);
    }
    if (newest.length > 0) held.logId = parseLogItem(String(newest[0])).id;
    held.version = Math.max(held.version, Number(seen ?? 0) || 0);
    return true;
  }

  /**
   * The whole list as Redis holds it now, a page at a time (requests run between pages), or `undefined` when it
   * was written again meanwhile (the next sync reads the newer one). Its version is read with every page.
   */
  private async read(name: string): Promise<HeldList | undefined> {
    const key = listKey(this.prefix, name);
    // The version and the log's newest item before each page: a write between two pages moves one of them.
    const versionRead = ["hget", liveModeKey(this.prefix), listVersionField(name)] as const;
    const logRead = ["lindex", listLogKey(this.prefix, name), 0] as const;
    const addresses = new IpSet();
    const identities = new Map<string, number>();
    let version: number | undefined;
    let logId: string | undefined;
    for (let from = 0; ; from += this.pageSize) {
      const sentAt = this.now();
      // Redis time with the first page only: the clock's offset is learnt once a read (TIME is a billed command).
      const [seen, newest, page, time] = await this.redis.pipeline([
        versionRead,
        logRead,
        ["zrange", key, from, from + this.pageSize - 1, "withscores"],
        ...(from === 0 ? [["time"] as const] : []),
      ]);
      const seenVersion = Number(seen ?? 0) || 0;
      const seenLogId = newest === null || newest === undefined ? undefined : parseLogItem(String(newest)).id;
      if (version === undefined) {
        version = seenVersion;
        logId = seenLogId;
        // Redis time at the reply, less half the round trip: good to a few ms, and entries live minutes or more.
        const [seconds, micros] = Array.isArray(time) ? time.map(Number) : [0, 0];
        const receivedAt = this.now();
        this.clockOffsetMs =
          (seconds ?? 0) * 1000 + Math.floor((micros ?? 0) / 1000) - (sentAt + receivedAt) / 2;
      } else if (seenVersion !== version || seenLogId !== logId) return undefined;
      const members = Array.isArray(page) ? (page as unknown[]) : [];
      for (let i = 0; i + 1 < members.length; i += 2) {
        const entry = String(members[i]);
        const score = String(members[i + 1]);
        const expiresAtMs = score === "inf" || score === "+inf" ? 0 : Number(score);
        if (entry.startsWith(IDENTITY_ENTRY)) {
          identities.set(entry.slice(IDENTITY_ENTRY.length), expiresAtMs);
          continue;
        }
        const prefix = parsePrefix(entry);
        if (typeof prefix !== "string") addresses.add(prefix, expiresAtMs); // written checked: never a string
      }
      if (members.length < 2 * this.pageSize) break;
    }
    return { version: version ?? 0, logId, addresses, identities };
  }
}
