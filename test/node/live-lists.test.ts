// An isolate's copy of a live list (src/live/lists.ts) against the run's real Redis through the REST server: read
// a page at a time, swapped in only whole and only as one version of the list (a write landing mid-read is
// never half-taken), entries ending with their TTL, and the admin side's checks (src/admin/lists.ts).
import { describe, expect, inject, it } from "vitest";
import { checkEntries, readList, writeList } from "../../src/admin/lists";
import { createRedisPort, type RedisPort } from "../../src/engine/redis";
import { LiveLists } from "../../src/live/lists";
import { listVersionField, liveModeKey } from "../../src/live/modes";
import { addressBits } from "../../src/util/address";

const redis = createRedisPort({
  url: inject("redisRestUrl"),
  token: inject("redisRestToken"),
  timeoutMs: 5000,
});
let seq = 0;
const prefixOf = () => `livelists-${process.pid}-${Date.now().toString(36)}-${++seq}`;
const bits = (ip: string) => addressBits(ip) as NonNullable<ReturnType<typeof addressBits>>;

/** Runs every background read to its end. */
async function settle(pending: Promise<unknown>[]): Promise<void> {
  while (pending.length > 0) await pending.shift();
}

async function put(prefix: string, entries: unknown[], name = "l") {
  const add = await checkEntries("entries", entries, undefined);
  return writeList(redis, prefix, name, { kind: "replace", add, remove: [] });
}

describe("an isolate's copy of a live list", () => {
  it("is read a page at a time and held whole: addresses, CIDRs and identities", async () => {
    const prefix = prefixOf();
    const entries = Array.from({ length: 12 }, (_, i) => `192.0.2.${i}`);
    expect(await put(prefix, [...entries, "2001:db8::/32", "api-key-1"])).toMatchObject({
      written: true,
      count: 14,
    });
    const pages: unknown[] = [];
    const counting: RedisPort = {
      ...redis,
      pipeline: (commands, budget) => {
        pages.push(commands[0]);
        return redis.pipeline(commands, budget);
      },
    };
    const lists = new LiveLists(counting, prefix, ["l"], { pageSize: 5 });
    const pending: Promise<unknown>[] = [];
    lists.load("l", (p) => pending.push(p));
    await settle(pending);
    expect(pages).toHaveLength(3);
    expect(lists.versionOf("l")).toBe(1);
    expect(lists.holdsAddress("l", bits("192.0.2.11"))).toBe(true);
    expect(lists.holdsAddress("l", bits("2001:db8:ffff::1"))).toBe(true);
    expect(lists.holdsAddress("l", bits("192.0.2.12"))).toBe(false);
    expect(lists.holdsIdentities("l")).toBe(true);
    const { entries: shown } = await readList(redis, prefix, "l");
    const hashed = (shown as string[]).find((entry) => entry.startsWith("hash:")) as string;
    expect(lists.holdsIdentity("l", hashed.slice("hash:".length))).toBe(true);
  });

  it("drops a read that a write overtook, and takes the newer version on the next", async () => {
    const prefix = prefixOf();
    await put(
      prefix,
      Array.from({ length: 10 }, (_, i) => `198.51.100.${i}`),
    );
    let pagesRead = 0;
    const racing: RedisPort = {
      ...redis,
      pipeline: async (commands, budget) => {
        const replies = await redis.pipeline(commands, budget);
        // A write lands between the first page and the second.
        if (++pagesRead === 1) await put(prefix, ["203.0.113.0/24"]);
        return replies;
      },
    };
    const lists = new LiveLists(racing, prefix, ["l"], { pageSize: 5 });
    const pending: Promise<unknown>[] = [];
    lists.load("l", (p) => pending.push(p));
    await settle(pending);
    expect(lists.versionOf("l")).toBe(0); // nothing half-taken
    expect(lists.holdsAddress("l", bits("198.51.100.1"))).toBe(false);
    lists.sync({ rules: {}, lists: { l: 2 } }, (p) => pending.push(p));
    await settle(pending);
    expect(lists.versionOf("l")).toBe(2);
    expect(lists.holdsAddress("l", bits("203.0.113.9"))).toBe(true);
    expect(lists.holdsAddress("l", bits("198.51.100.1"))).toBe(false);
  });

  it("lets an entry go when its TTL runs out, and is not read again for a version it holds", async () => {
    const prefix = prefixOf();
    await put(prefix, [{ entry: "100.64.0.0/10", ttl: 60 }, "100.128.0.1"]);
    let clock = Date.now();
    let reads = 0;
    const counted: RedisPort = {
      ...redis,
      pipeline: (commands, budget) => {
        reads++;
        return redis.pipeline(commands, budget);
      },
    };
    const lists = new LiveLists(counted, prefix, ["l"], { now: () => clock });
    const pending: Promise<unknown>[] = [];
    lists.sync({ rules: {}, lists: { l: 1 } }, (p) => pending.push(p));
    await settle(pending);
    expect(lists.holdsAddress("l", bits("100.100.0.1"))).toBe(true);
    clock += 61_000;
    expect(lists.holdsAddress("l", bits("100.100.0.1"))).toBe(false);
    expect(lists.holdsAddress("l", bits("100.128.0.1"))).toBe(true);
    lists.sync({ rules: {}, lists: { l: 1 } }, (p) => pending.push(p));
    expect(pending).toHaveLength(0);
    expect(reads).toBe(1);
  });

  it("is written all or nothing: a PATCH removes then adds, and one over the cap changes nothing", async () => {
    const prefix = prefixOf();
    await put(prefix, ["10.0.0.0/8", "10.1.0.0/16"]);
    const add = await checkEntries("add", ["10.1.0.0/16", "10.2.0.0/16"], 30);
    const remove = await checkEntries("remove", ["10.0.0.0/8", "10.1.0.0/16"], undefined, false);
    expect(await writeList(redis, prefix, "l", { kind: "patch", add, remove })).toMatchObject({
      written: true,
      count: 2,
      version: 2,
    });
    expect((await readList(redis, prefix, "l")).entries).toEqual([
      { entry: "10.1.0.0/16", ttl: 30 },
      { entry: "10.2.0.0/16", ttl: 30 },
    ]);
    const many = await checkEntries(
      "add",
      Array.from({ length: 99_999 }, (_, i) => `100.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`),
      undefined,
    );
    expect(await writeList(redis, prefix, "l", { kind: "patch", add: many, remove: [] })).toEqual({
      written: false,
      count: 100_001,
    });
    expect((await readList(redis, prefix, "l")).entries).toHaveLength(2);
    expect(await redis.send(["hget", liveModeKey(prefix), listVersionField("l")])).toBe("2");
  }, 30_000);
});
