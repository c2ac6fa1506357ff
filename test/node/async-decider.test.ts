// An isolate's async rules when Redis cannot count their units (docs/going-global.md, "Async rules"): the
// isolate takes what it could not send as counted, so an outage spends its view of the identity instead of
// admitting without end, then lets one request a second through to ask again. The endpoint is a real one that
// nothing listens on: every count fails as it would against a database that went away.
import { describe, expect, it } from "vitest";
import { freePort } from "../../redis-rest/index.mjs";
import { createStore } from "../../src/engine/store";
import type { RuleCall } from "../../src/engine/types";
import { AsyncDecider } from "../../src/leases/async";
import { EndpointDecider } from "../../src/resilience/decider";
import { ruleCall } from "./lua-support";

describe("async rules with Redis unreachable", () => {
  it("admit the capacity they last knew of, then one request a second", async () => {
    const port = await freePort(); // nothing listens there
    const store = createStore({
      url: `http://127.0.0.1:${port}`,
      token: "t",
      prefix: "async-down",
      timeoutMs: 200,
    });
    const redis = new EndpointDecider(store, { timeoutMs: 200, log: () => undefined });
    let clockMs = 1_000_000;
    const isolate = new AsyncDecider(redis, redis, () => clockMs);
    const call: RuleCall = { ...ruleCall({ algorithm: "fixed-window", limit: 10 }), sync: "async" };

    /** One request, and its flush waited out (as the next request a while later would find it). */
    const send = async () => {
      const flushes: Promise<unknown>[] = [];
      const decision = isolate.decideNow([{ ...call }], "-", (p) => flushes.push(p));
      await Promise.all(flushes);
      expect(decision?.results[0]?.source).toBe("async");
      return decision?.allowed === true;
    };

    let admitted = 0;
    for (let i = 0; i < 30; i++) if (await send()) admitted++;
    expect(admitted).toBe(10); // the limit, never heard otherwise from Redis, spent a tenth at a time
    expect(await send()).toBe(false);
    clockMs += 1000;
    expect(await send()).toBe(true); // one asks again
    expect(await send()).toBe(false);
  });
});
