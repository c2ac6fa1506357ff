// The admin API's data routes while Redis hangs (redis-server frozen with SIGSTOP): `/rules` still tells the
// effective rules and modes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ADMIN_TIMEOUT_MS,
  AUTH,
  type FrozenStack,
  startStack,
  timed,
  warmWorker,
  whileFrozen,
} from "./frozen-redis";

const RULES = [{ name: "api", key: "ip", algorithm: "fixed-window", limit: 1000, period: "1h" }];
const JSON_AUTH = { ...AUTH, "Content-Type": "application/json" };

let stack: FrozenStack;

beforeAll(async () => {
  stack = await startStack();
}, 60_000);

afterAll(() => stack?.close());

describe("GET /__floodgate/rules when Redis cannot be read", () => {
  it("answers with the isolate's own copy of the live modes, and says so", async () => {
    const worker = await warmWorker(stack, RULES);
    const put = await timed(worker, "/__floodgate/mode", {
      method: "PUT",
      headers: JSON_AUTH,
      body: JSON.stringify({ mode: "monitor", rule: "api" }),
    });
    expect(put.json).toMatchObject({ liveModesFrom: "redis" });
    const live = await timed(worker, "/__floodgate/rules", { headers: AUTH });
    expect(live.json).toMatchObject({ liveModesFrom: "redis" });
    await whileFrozen(stack, worker, async () => {
      const rules = await timed(worker, "/__floodgate/rules", { headers: AUTH });
      expect(rules.status).toBe(200);
      // The switch made before Redis froze: this isolate obeys it, and shows it.
      expect(rules.json).toEqual({ ...live.json, liveModesFrom: "isolate" });
      expect(rules.json.rules[0].mode).toMatchObject({ effective: "monitor", source: "live-rule" });
      expect(rules.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  });
});
