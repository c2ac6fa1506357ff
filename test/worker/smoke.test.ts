import { exports, env } from "cloudflare:workers";
import { expect, it } from "vitest";
it("serves", async () => {
  const res = await exports.default.fetch("http://x/__smoke");
  expect(await res.text()).toBe("lua bytes: 15");
  expect((env as any).UPSTASH_REDIS_REST_TOKEN).toBe("t");
});
