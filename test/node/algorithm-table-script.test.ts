/**
 * The algorithm table (src/engine/algorithms.ts) against the real script on real Redis, through the store as
 * the Worker calls it: for every row, the code it sends makes the script behave as the row's traits promise
 * (capacity, cost, slots, request ids, stamps, delay, leases, the short reply), and a code no row has is an
 * error. Whatever files the script is assembled from, a row whose code or traits disagree with it fails here.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ALGORITHM_TRAITS, ALGORITHMS, traitsOf } from "../../src/engine/algorithms";
import { stateKey } from "../../src/engine/keys";
import { scriptArguments } from "../../src/engine/script";
import type { Store } from "../../src/engine/store";
import type { RuleCall } from "../../src/engine/types";
import {
  directRedis,
  offsetToWindowStart,
  requestId,
  ruleCall,
  testStore,
  uniquePrefix,
} from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("algorithm-table");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const PERIOD = 60_000;
const ROOT = resolve(import.meta.dirname, "../..");

/** One call's result, decided `timeOffsetMs` into the script's clock (a window's start: no edge mid-test). */
async function decideOne(call: RuleCall, id = requestId(), opts: Parameters<Store["decide"]>[2] = {}) {
  const decision = await store.decide([call], id, opts);
  return { allowed: decision.allowed, ...(decision.results[0] as NonNullable<(typeof decision.results)[0]>) };
}

/** Everything the state key of `call` holds, as text. */
async function stateText(call: RuleCall): Promise<string> {
  const key = stateKey(prefix, call.rule, call.identityHash);
  const type = await redis.type(key);
  if (type === "zset") return (await redis.zrange(key, 0, -1, "WITHSCORES")).join(" ");
  if (type === "string") return (await redis.get(key)) ?? "";
  if (type === "hash") return JSON.stringify(await redis.hgetall(key));
  return type;
}

describe.each(ALGORITHMS)("%s (table row → script)", (algorithm) => {
  const traits = traitsOf(algorithm);

  it("admits exactly its capacity (the burst where it takes one, else the limit) and denies the next", async () => {
    const call = ruleCall({ algorithm, limit: 2, burst: 4, periodMs: PERIOD });
    const timeOffsetMs = await offsetToWindowStart(redis, PERIOD);
    const capacity = traits.takesBurst ? 4 : 2;
    const outcomes: string[] = [];
    for (let i = 0; i < capacity + 1; i++)
      outcomes.push((await decideOne(call, undefined, { timeOffsetMs })).outcome);
    expect(outcomes).toEqual([...Array(capacity).fill("allowed"), "denied"]);
  });

  it(traits.takesCost ? "counts a request's cost" : "counts one per request, whatever its cost", async () => {
    const call = ruleCall({ algorithm, limit: 2, burst: 2, cost: 3, periodMs: PERIOD });
    const r = await decideOne(call);
    if (traits.takesCost) expect(r.outcome).toBe("cost-exceeds-capacity");
    else expect(r).toMatchObject({ outcome: "allowed", remaining: 1 });
  });

  it(traits.holdsSlot ? "frees its slot on release" : "keeps what it counted on release", async () => {
    const call = ruleCall({ algorithm, limit: 1, burst: 1, periodMs: PERIOD });
    const first = requestId();
    const timeOffsetMs = await offsetToWindowStart(redis, PERIOD);
    expect((await decideOne(call, first, { timeOffsetMs })).outcome).toBe("allowed");
    expect((await decideOne(call, undefined, { timeOffsetMs })).outcome).toBe("denied");
    await store.release(call, first);
    expect((await decideOne(call, undefined, { timeOffsetMs })).outcome).toBe(
      traits.holdsSlot ? "allowed" : "denied",
    );
  });

  it(traits.storesRequestId ? "stores the request id" : "stores no request id", async () => {
    const call = ruleCall({ algorithm, limit: 5, burst: 5, periodMs: PERIOD });
    const id = `${requestId()}-marker`;
    expect((await decideOne(call, id)).outcome).toBe("allowed");
    expect((await stateText(call)).includes(id)).toBe(traits.storesRequestId);
  });

  it(traits.shape === "bucket" ? "stamps the TAT it wrote" : "has no TAT to stamp", async () => {
    const call = ruleCall({ algorithm, limit: 5, burst: 5, periodMs: PERIOD });
    const r = await decideOne(call, undefined, { stamps: true });
    expect(r.outcome).toBe("allowed");
    expect(r.reservation !== undefined).toBe(traits.shape === "bucket");
  });

  it(
    traits.takesDelay
      ? "holds a request over the rate for its slot"
      : "denies a request over the rate, delay or not",
    async () => {
      const call = ruleCall({ algorithm, limit: 1, burst: 1, periodMs: PERIOD, delayMs: PERIOD });
      const timeOffsetMs = await offsetToWindowStart(redis, PERIOD);
      expect((await decideOne(call, undefined, { timeOffsetMs })).outcome).toBe("allowed");
      const over = await decideOne(call, undefined, { timeOffsetMs });
      if (traits.takesDelay) {
        expect(over.outcome).toBe("allowed");
        expect(over.delayMs).toBeGreaterThan(0);
      } else {
        expect(over.outcome).toBe("denied");
        expect(over.delayMs).toBeUndefined();
      }
    },
  );

  it(traits.leasable ? "grants a lease" : "grants no lease", async () => {
    const call = ruleCall({ algorithm, limit: 100, burst: 100, periodMs: PERIOD });
    const r = await decideOne(call, undefined, { lease: { units: [10], maxMs: 1000 } });
    expect(r.outcome).toBe("allowed");
    expect(r.lease !== undefined).toBe(traits.leasable);
  });

  it(
    traits.integerReply ? "answers a plain allowed call with a bare integer" : "answers with an array",
    async () => {
      const call = ruleCall({ algorithm, limit: 5, burst: 5, periodMs: PERIOD, override: false });
      const id = requestId();
      const { script, keys, args } = scriptArguments(prefix, [call], id);
      await store.redis.runScript(script, keys, args); // the second call finds live state
      const raw = await store.redis.runScript(script, keys, args);
      expect(typeof raw === "number").toBe(traits.integerReply);
    },
  );
});

/** Every Lua source under lua/ (one script, or fragments assembled per call kind), concatenated. */
function luaSources(dir = join(ROOT, "lua")): string {
  return readdirSync(dir, { withFileTypes: true })
    .map((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return luaSources(path);
      return entry.name.endsWith(".lua") ? readFileSync(path, "utf8") : "";
    })
    .join("\n");
}

describe("the script's algorithm codes", () => {
  it("are the table's, each row its own", () => {
    const codes = ALGORITHMS.map((a) => ALGORITHM_TRAITS[a].code);
    expect(new Set(codes).size).toBe(codes.length);
  });

  it("are the ones the Lua sources define and document, whatever files they are split into", () => {
    const lua = luaSources();
    // The line naming the codes, `local FIXED, SLIDING, … = "1", "2", …`: exactly the table's codes.
    const line = /^local ((?:[A-Z_]+, )*[A-Z_]+) = ((?:"\d+", )*"\d+")\s*$/m.exec(lua);
    expect(line, "a line of algorithm codes in lua/").not.toBeNull();
    const defined = [...(line?.[2] ?? "").matchAll(/"(\d+)"/g)].map((m) => Number(m[1]));
    expect(defined.sort((a, b) => a - b)).toEqual(
      ALGORITHMS.map((a) => traitsOf(a).code).sort((a, b) => a - b),
    );
    // The slot's documentation (`1 fixed-window | 2 sliding-window | …`) names each row's code.
    for (const algorithm of ALGORITHMS) {
      expect(lua).toMatch(new RegExp(`(^|[\\s|])${traitsOf(algorithm).code} ${algorithm}\\b`, "m"));
    }
  });

  it.each([0, Math.max(...ALGORITHMS.map((a) => traitsOf(a).code)) + 1, 99])(
    "refuses code %i, which no row has, with an error and writes nothing",
    async (code) => {
      const call = ruleCall({ algorithm: "fixed-window", override: false });
      const { script, keys, args } = scriptArguments(prefix, [call, { ...call, rule: "other" }], requestId());
      // The second rule's algorithm slot (the first rule's is known: it would be counted first, were it not checked).
      const second = args.length - 7;
      args[second] = String(code);
      await expect(store.redis.runScript(script, keys, args)).rejects.toThrow(/unknown algorithm/);
      expect(await redis.exists(keys[0] as string)).toBe(0);
    },
  );
});
