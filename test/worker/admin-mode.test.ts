import { describe, expect, it } from "vitest";
import { readLiveModes } from "../../src/live/modes";
import { call, makeEnv, port, redis, send, uniquePrefix } from "./admin-harness";

const RULES = [
  { name: "api", key: "header:x-api-key", algorithm: "token-bucket", limit: 100, period: "1m", burst: 20 },
  { name: "pinned", key: "ip", algorithm: "fixed-window", limit: 10, period: "10s", mode: "on" },
];
/** Each test its own prefix, so its own live switches: it starts with none, whatever another test left. */
function fresh() {
  const prefix = uniquePrefix("admin-mode");
  return { prefix, testEnv: makeEnv(prefix, RULES, { RATE_LIMIT_MODE: "on" }) };
}

interface RulesBody {
  mode: { effective: string; source: string; binding: string; live: string | null };
  rules: Array<{
    name: string;
    source: string;
    limit: number;
    period: string;
    burst: number;
    key: string;
    mode: { effective: string; source: string; configured: string | null; live: string | null };
  }>;
}

const rules = async (testEnv: Record<string, unknown>) =>
  (await (await call(testEnv, "/__floodgate/rules")).json()) as RulesBody;
const ruleNamed = (body: RulesBody, name: string) => body.rules.find((r) => r.name === name);

describe("live mode switch and effective rules", () => {
  it("shows the configured rules and modes, each with where it came from", async () => {
    const { testEnv } = fresh();
    const body = await rules(testEnv);
    expect(body.mode).toEqual({ effective: "on", source: "binding", binding: "on", live: null });
    expect(ruleNamed(body, "api")).toMatchObject({
      source: "binding",
      key: "header:x-api-key",
      limit: 100,
      period: "1m",
      burst: 20,
      mode: { effective: "on", source: "binding", configured: null, live: null },
    });
    expect(ruleNamed(body, "pinned")?.mode).toEqual({
      effective: "on",
      source: "rule",
      configured: "on",
      live: null,
    });
  });

  it("applies precedence: live per-rule > rule's mode > live global > RATE_LIMIT_MODE, and null clears", async () => {
    const { prefix, testEnv } = fresh();
    const global = await send(testEnv, "PUT", "/__floodgate/mode", { mode: "monitor" });
    expect(global.status).toBe(200);
    let body = await rules(testEnv);
    expect(body.mode).toMatchObject({ effective: "monitor", source: "live-global", live: "monitor" });
    expect(ruleNamed(body, "api")?.mode).toMatchObject({ effective: "monitor", source: "live-global" });
    // The rule's own configured mode beats a live global switch...
    expect(ruleNamed(body, "pinned")?.mode).toMatchObject({ effective: "on", source: "rule" });

    // ...but a live per-rule switch beats everything.
    await send(testEnv, "PUT", "/__floodgate/mode", { mode: "off", rule: "pinned" });
    body = await rules(testEnv);
    expect(ruleNamed(body, "pinned")?.mode).toMatchObject({
      effective: "off",
      source: "live-rule",
      live: "off",
    });

    await send(testEnv, "PUT", "/__floodgate/mode", { mode: null, rule: "pinned" });
    await send(testEnv, "PUT", "/__floodgate/mode", { mode: null });
    body = await rules(testEnv);
    expect(body.mode.source).toBe("binding");
    expect(ruleNamed(body, "pinned")?.mode.source).toBe("rule");
    expect(await readLiveModes(port, prefix)).toEqual({ rules: {} });
  });

  it("keeps the switch in Redis with no expiry", async () => {
    const { prefix, testEnv } = fresh();
    await send(testEnv, "PUT", "/__floodgate/mode", { mode: "monitor", rule: "api" });
    expect(await redis.ttl(`${prefix}:mode`)).toBe(-1);
  });

  it("rejects a malformed switch with 400 and an unknown rule with 404", async () => {
    const { prefix, testEnv } = fresh();
    for (const body of [
      "nope",
      {},
      { mode: "sometimes" },
      { mode: "on", rule: 5 },
      { mode: "on", extra: 1 },
    ]) {
      const response = await send(testEnv, "PUT", "/__floodgate/mode", body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(response.headers.get("Content-Type")).toBe("application/problem+json");
    }
    expect((await send(testEnv, "PUT", "/__floodgate/mode", { mode: "off", rule: "ghost" })).status).toBe(
      404,
    );
    // What a request sent is quoted, but never at any length.
    for (const body of [{ mode: "off", rule: "g".repeat(100_000) }, { mode: "m".repeat(100_000) }]) {
      const response = await send(testEnv, "PUT", "/__floodgate/mode", body);
      expect([400, 404]).toContain(response.status);
      expect((await response.text()).length).toBeLessThan(1000);
    }
    expect(await readLiveModes(port, prefix)).toEqual({ rules: {} });
  });

  it("needs the token for /mode and /rules", async () => {
    const { prefix, testEnv } = fresh();
    for (const token of [null, "wrong"]) {
      expect((await call(testEnv, "/__floodgate/rules", { token })).status).toBe(401);
      const put = await call(testEnv, "/__floodgate/mode", { method: "PUT", token, body: '{"mode":"off"}' });
      expect(put.status).toBe(401);
    }
    expect(await readLiveModes(port, prefix)).toEqual({ rules: {} });
  });
});
