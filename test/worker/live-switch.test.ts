import { describe, expect, it } from "vitest";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, send, uniquePrefix } from "./admin-harness";

// A fixed window of an hour: the test needs a rule that counts, not a particular window length.
const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 2, period: "1h" }];
/**
 * Two bindings objects with one prefix = two isolates of the same deployment (the Worker builds its parts
 * once per object); each test its own prefix, so a live switch one test leaves is never seen by another.
 */
function twoIsolates() {
  const prefix = uniquePrefix("live-switch-e2e");
  return { isolateA: makeEnv(prefix, RULES), isolateB: makeEnv(prefix, RULES) };
}

const request = (env: Record<string, unknown>, apiKey: string) =>
  call(env, "/anything", { headers: { "x-api-key": apiKey }, ip: "198.51.100.9" });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("switching a rule to monitor, live", () => {
  it("stops 429s on the next request in the isolate that switched, and within a second everywhere", async () => {
    // The rule's hour must not turn mid-test: in its last 10 s (1 run in 360), wait for the next one.
    await awayFromWindowEdge(3_600_000, 10_000);
    const { isolateA, isolateB } = twoIsolates();
    // Both isolates have seen the rule enforce (and hold a copy of the live modes).
    expect((await request(isolateA, "key-1")).status).toBe(200);
    expect((await request(isolateA, "key-1")).status).toBe(200);
    expect((await request(isolateA, "key-1")).status).toBe(429);
    expect((await request(isolateB, "key-1")).status).toBe(429);

    const switchedAt = Date.now();
    expect((await send(isolateA, "PUT", "/__floodgate/mode", { mode: "monitor", rule: "api" })).status).toBe(
      200,
    );

    // The isolate that took the switch applies it on its very next request.
    const next = await request(isolateA, "key-1");
    expect(next.status).toBe(200);
    // Still counted and reported: the client is over its limit, and the headers say so.
    expect(next.headers.get("X-RateLimit-Remaining")).toBe("0");
    expect(next.headers.get("RateLimit")).toMatch(/^"api";r=0;t=\d+$/);

    // Another isolate: within one second (its copy refreshes at most once a second, in the background).
    let firstAllowedMs: number | undefined;
    while (Date.now() - switchedAt < 2500) {
      const response = await request(isolateB, "key-1");
      if (response.status === 200) {
        firstAllowedMs = Date.now() - switchedAt;
        expect(response.headers.get("X-RateLimit-Remaining")).toBe("0");
        break;
      }
      expect(response.status).toBe(429);
      await sleep(50);
    }
    expect(firstAllowedMs).toBeDefined();
    expect(firstAllowedMs).toBeLessThanOrEqual(2000); // one refresh interval (1 s) + one Redis read, with slack for a loaded CI machine
    for (let i = 0; i < 5; i++) expect((await request(isolateB, "key-1")).status).toBe(200);

    // And back on: 429s again (the switch cleared with null).
    await send(isolateA, "PUT", "/__floodgate/mode", { mode: null, rule: "api" });
    expect((await request(isolateA, "key-1")).status).toBe(429);
  });

  it("turns a rule off live: no headers, no counting", async () => {
    const { isolateA } = twoIsolates();
    await send(isolateA, "PUT", "/__floodgate/mode", { mode: "off" });
    // A rule's configured mode would beat the live global switch; this rule has none.
    const response = await request(isolateA, "key-off");
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit")).toBeNull();
    await send(isolateA, "PUT", "/__floodgate/mode", { mode: null });
    const counted = await request(isolateA, "key-off");
    expect(counted.headers.get("X-RateLimit-Remaining")).toBe("1");
  });
});
