// An edit of a live list reaches an isolate's copy (src/live/lists.ts) through the list's change log
// (src/live/list-log.ts, written by lua/list-write.lua in the write's own script call): the isolate applies the
// entries added and removed, in one Redis call whatever the list's size, and reads the list whole only where the
// log cannot say (a replace, a delete, a change too big to log, more writes missed than the log keeps).
// Against the run's real Redis through the REST server.
import { describe, expect, inject, it } from "vitest";
import { checkEntries, deleteList, type ListChange, writeList } from "../../src/admin/lists";
import { createRedisPort, type RedisPort } from "../../src/engine/redis";
import { LIST_LOG_ITEMS, LIST_LOG_MOST } from "../../src/live/list-log";
import { LiveLists } from "../../src/live/lists";
import { addressBits } from "../../src/util/address";

const redis = createRedisPort({
  url: inject("redisRestUrl"),
  token: inject("redisRestToken"),
  timeoutMs: 5000,
});
let seq = 0;
const prefixOf = () => `listedits-${process.pid}-${Date.now().toString(36)}-${++seq}`;
const bits = (ip: string) => addressBits(ip) as NonNullable<ReturnType<typeof addressBits>>;

/** An isolate's lists over a port that counts what it sends: `reads` = the commands of each pipeline. */
function isolate(prefix: string) {
  const reads: string[][] = [];
  const counting: RedisPort = {
    ...redis,
    pipeline: (commands, budget) => {
      reads.push(commands.map((command) => String(command[0])));
      return redis.pipeline(commands, budget);
    },
  };
  const lists = new LiveLists(counting, prefix, ["l"], { pageSize: 1000 });
  /** Brings the list up to date as a sync that saw its version move would, and waits for it. */
  const catchUp = async () => {
    reads.length = 0;
    const pending: Promise<unknown>[] = [];
    lists.load("l", (p) => pending.push(p));
    while (pending.length > 0) await pending.shift();
    return reads.flat();
  };
  return { lists, catchUp };
}

async function write(prefix: string, kind: ListChange["kind"], add: unknown[], remove: unknown[] = []) {
  const change: ListChange = {
    kind,
    add: await checkEntries("add", add, undefined),
    remove: await checkEntries("remove", remove, undefined, false),
  };
  const written = await writeList(redis, prefix, "l", change);
  if (!written.written) throw new Error(`refused: the list would hold ${written.count}`);
  return written;
}

const many = (n: number, third: number) =>
  Array.from({ length: n }, (_, i) => `10.${third}.${(i >> 8) & 255}.${i & 255}`);

describe("an edit of a live list", () => {
  it("is applied from the change log in one Redis call, not by reading the whole list again", async () => {
    const prefix = prefixOf();
    await write(prefix, "replace", [...many(5000, 1), "2001:db8:1::/48", "key-kept", "key-gone"]);
    const { lists, catchUp } = isolate(prefix);
    const first = await catchUp();
    expect(first.filter((c) => c === "zrange")).toHaveLength(6); // 5,003 entries, 1,000 a page

    // Added (with a TTL and without), removed, a CIDR and a key's value: one call, no page of the list.
    const { version } = await write(
      prefix,
      "patch",
      ["203.0.113.0/24", { entry: "198.51.100.7", ttl: 3600 }, "key-new"],
      ["10.1.0.5", "2001:db8:1::/48", "key-gone"],
    );
    expect(await catchUp()).toEqual(["hget", "lrange"]);
    expect(lists.versionOf("l")).toBe(version);
    expect(lists.holdsAddress("l", bits("203.0.113.77"))).toBe(true);
    expect(lists.holdsAddress("l", bits("198.51.100.7"))).toBe(true);
    expect(lists.holdsAddress("l", bits("10.1.0.5"))).toBe(false);
    expect(lists.holdsAddress("l", bits("10.1.0.6"))).toBe(true);
    expect(lists.holdsAddress("l", bits("2001:db8:1::1"))).toBe(false);
    const hash = async (value: string) =>
      ((await checkEntries("k", [value], undefined))[0]?.member ?? "").slice("hash:".length);
    expect(lists.holdsIdentity("l", await hash("key-new"))).toBe(true);
    expect(lists.holdsIdentity("l", await hash("key-kept"))).toBe(true);
    expect(lists.holdsIdentity("l", await hash("key-gone"))).toBe(false);

    // An entry added again takes its new TTL, a shorter one too (as Redis holds it): gone once it runs out.
    await write(prefix, "patch", [{ entry: "203.0.113.0/24", ttl: 1 }]);
    expect(await catchUp()).toEqual(["hget", "lrange"]);
    expect(lists.holdsAddress("l", bits("203.0.113.77"))).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    expect(lists.holdsAddress("l", bits("203.0.113.77"))).toBe(false);

    // Three edits since the last catch-up: all three, in order (removed, then added again).
    await write(prefix, "patch", [], ["10.1.0.7"]);
    await write(prefix, "patch", ["10.1.0.7"]);
    await write(prefix, "patch", [], ["10.1.0.8"]);
    expect(await catchUp()).toEqual(["hget", "lrange"]);
    expect(lists.holdsAddress("l", bits("10.1.0.7"))).toBe(true);
    expect(lists.holdsAddress("l", bits("10.1.0.8"))).toBe(false);
    // Nothing new: the log's newest item is the one held.
    expect(await catchUp()).toEqual(["hget", "lrange"]);
  });

  it("reads the list whole where the log cannot say: a replace, a big change, more writes missed than it keeps, a delete", async () => {
    const prefix = prefixOf();
    await write(prefix, "replace", many(100, 2));
    const { lists, catchUp } = isolate(prefix);
    await catchUp();

    await write(prefix, "replace", ["192.0.2.0/24"]);
    expect(await catchUp()).toContain("zrange");
    expect(lists.holdsAddress("l", bits("10.2.0.5"))).toBe(false);
    expect(lists.holdsAddress("l", bits("192.0.2.9"))).toBe(true);

    await write(prefix, "patch", many(LIST_LOG_MOST + 1, 3));
    expect(await catchUp()).toContain("zrange");
    expect(lists.holdsAddress("l", bits(`10.3.3.${LIST_LOG_MOST - 3 * 256}`))).toBe(true);

    for (let i = 0; i <= LIST_LOG_ITEMS; i++) await write(prefix, "patch", [`10.4.0.${i}`]);
    const missed = await catchUp();
    expect(missed.filter((c) => c === "lrange")).toHaveLength(2); // the newest few, then all it keeps
    expect(missed).toContain("zrange");
    expect(lists.holdsAddress("l", bits("10.4.0.0"))).toBe(true);
    expect(lists.holdsAddress("l", bits(`10.4.0.${LIST_LOG_ITEMS}`))).toBe(true);

    await deleteList(redis, prefix, "l");
    expect(await catchUp()).toContain("zrange");
    expect(lists.holdsAddress("l", bits("192.0.2.9"))).toBe(false);
  });
});
