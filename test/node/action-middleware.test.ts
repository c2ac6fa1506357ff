// `onAction` through the Hono middleware in a Node app: a `deny` rule's refusal (its 403) and a monitor-mode
// deny rule's "would deny" (the request goes on) are each told once, with the rule's name; an allow rule's
// exemption is not; an observer that throws or rejects fails nothing.
import { Hono } from "hono";
import { expect, inject, it } from "vitest";
import { type RateLimitOptions, rateLimit } from "../../src/middleware";

const RULES: RateLimitOptions["rules"] = [
  { name: "trusted", action: "allow", match: { user_agent: ["*monitoring-probe*"] } },
  { name: "no-curl", action: "deny", match: { user_agent: ["*curl*"] } },
  { name: "watch-wget", action: "deny", mode: "monitor", match: { user_agent: ["*wget*"] } },
  { name: "per-ip", key: "header:x-client", algorithm: "fixed-window", limit: 100, period: "1h" },
];

/** An app behind the middleware that tells `onAction` to `observer`; `/` answers 200 "ok". */
function appTelling(observer: (rule: string, verdict: "denied" | "would-deny") => unknown) {
  const app = new Hono();
  app.use(
    "*",
    rateLimit({
      redis: { url: inject("redisRestUrl"), token: inject("redisRestToken") },
      prefix: `actionmw${Date.now()}`,
      // Production's 200 ms budget can run out on a loaded machine; what is proven here is what is told.
      timeoutMs: 5000,
      rules: RULES,
      onAction: observer,
    }),
  );
  app.get("/", (c) => c.text("ok"));
  return app;
}

const as = (userAgent: string) => ({ headers: { "user-agent": userAgent, "x-client": "c1" } });

it("tells onAction of a deny rule's 403 and a monitor deny rule's would-deny, once each, by rule name", async () => {
  const told: [string, string][] = [];
  const app = appTelling((rule, verdict) => void told.push([rule, verdict]));

  const refused = await app.request("/", as("curl/8.5.0"));
  expect(refused.status).toBe(403);
  expect(told).toEqual([["no-curl", "denied"]]);

  const watched = await app.request("/", as("Wget/1.21"));
  expect(watched.status).toBe(200);
  expect(told).toEqual([
    ["no-curl", "denied"],
    ["watch-wget", "would-deny"],
  ]);

  // Exempted by the allow rule before the deny rules are reached; a plain request meets no action.
  expect((await app.request("/", as("monitoring-probe curl/8"))).status).toBe(200);
  expect((await app.request("/", as("Mozilla/5.0"))).status).toBe(200);
  expect(told).toHaveLength(2);
});

it("an onAction that throws or rejects changes no response", async () => {
  const throwing = appTelling(() => {
    throw new Error("observer broke");
  });
  expect((await throwing.request("/", as("curl/8.5.0"))).status).toBe(403);
  expect((await throwing.request("/", as("Wget/1.21"))).status).toBe(200);
  // A rejection left alone would be an unhandled rejection, which vitest reports as a failure of the run.
  const rejecting = appTelling(async () => {
    throw new Error("observer rejected");
  });
  expect((await rejecting.request("/", as("curl/8.5.0"))).status).toBe(403);
  expect((await rejecting.request("/", as("Wget/1.21"))).status).toBe(200);
});
