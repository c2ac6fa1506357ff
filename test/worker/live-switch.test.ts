import { describe, expect, it, onTestFinished } from "vitest";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, send } from "./admin-harness";

const PREFIX = "t-live-switch-e2e";
const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 2, period: "1m" }];
// Two bindings objects = two isolates of the same deployment (the Worker builds its parts once per object).
const isolateA = makeEnv(PREFIX, RULES);
const isolateB = makeEnv(PREFIX, RULES);

const request = (env: Record<string, unknown>, apiKey: string) =>
  call(env, "/anything", { headers: { "x-api-key": apiKey }, ip: "198.51.100.9" });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("switching a rule to monitor, live", () => {
  it("stops 429s on the next request in the isolate that switched, and within a second everywhere", async () => {
    await awayFromWindowEdge(60_000, 10_000); // the rule's fixed minute must not turn mid-test
    // Both isolates have seen the rule enforce (and hold a copy of the live modes).
    expect((await request(isolateA, "key-1")).status).toBe(200);
    expect((await request(isolateA, "key-1")).status).toBe(200);
    expect((await request(isolateA, "key-1")).status).toBe(429);
    expect((await request(isolateB, "key-1")).status).toBe(429);

    const switchedAt = Date.now();
    expect((await send(isolateA, "PUT", "/__floodgate/mode", { mode: "monitor", rule: "api" })).status).toBe(
      200,
    );
    // Whatever happens below, the next test starts without this switch.
    onTestFinished(async () => {
      await send(isolateA, "PUT", "/__floodgate/mode", { mode: null, rule: "api" });
    });

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
