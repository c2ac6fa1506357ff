import { describe, expect, it } from "vitest";
import { makeEnv, newTag, originCount, send } from "./proxy-harness";

const perIp = (limit: number, extra: Record<string, unknown> = {}) => ({
  name: "per-ip",
  key: "ip",
  algorithm: "fixed-window",
  limit,
  period: "1h",
  ...extra,
});

describe("limiting at the edge", () => {
  it("proxies the first requests and denies the one over the limit with a 429 problem", async () => {
    const env = makeEnv([perIp(3)]);
    const tag = newTag();
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      statuses.push(
        (await send(env, "/hello", { ip: "198.51.100.1", headers: { "x-count-tag": tag } })).status,
      );
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect(await originCount(tag)).toBe(3);
  });
});
