// What `rateLimit()` leaves on the context for the steps after it (`FloodgateVariables`): the decision and
// the request's facts as the limiter read them, once: a handler sees the same request id the limiter gave the
// request's concurrency slot and told `onDecision`, and the same client IP it keyed the request on.
import { randomUUID } from "node:crypto";
import { Hono } from "hono";
import { expect, inject, it } from "vitest";
import { MIDDLEWARE_OPTIONS, parseMiddlewareSettings } from "../../src/config";
import type { RequestFacts } from "../../src/identity";
import { type FloodgateVariables, rateLimit } from "../../src/middleware";

// The run's redis-server behind the local REST server (test/global-setup.ts); a unique key prefix per app.
const rest = { url: inject("redisRestUrl"), token: inject("redisRestToken") };

it("hands a handler the request facts the limiter decided with: the same request id, client IP and path", async () => {
  const told: string[] = [];
  const app = new Hono<{ Variables: FloodgateVariables }>();
  app.use(
    rateLimit({
      redis: { url: rest.url, token: rest.token },
      prefix: `facts${randomUUID()}`,
      clientIpHeader: "X-Real-IP",
      rules: [
        // A concurrency slot is held under the request's id: the limiter must read it.
        { name: "slots", key: "ip", algorithm: "concurrency", limit: 5 },
        { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 10, period: "1h" },
      ],
      onDecision: (event) => {
        told.push(event.requestId);
      },
    }),
  );
  app.get("/items/*", (c) => {
    const facts = c.var.floodgateRequest;
    return c.json({
      id: facts.id(),
      ip: facts.trustedIp(),
      path: facts.path,
      allowed: c.var.rateLimit?.allowed,
    });
  });

  const ids = new Set<string>();
  for (let i = 0; i < 2; i++) {
    const response = await app.request("/items/%61b/", { headers: { "X-Real-IP": "2001:DB8::1" } });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { id: string; ip: string; path: string; allowed: boolean };
    expect(body.id).toBe(told[i]);
    expect(body.ip).toBe("2001:db8::1"); // canonical, as the `ip` key hashed it
    expect(body.path).toBe("/items/ab/");
    expect(body.allowed).toBe(true);
    ids.add(body.id);
  }
  expect(ids.size).toBe(2); // each request its own facts
});

it("lets no step change a request's facts", () => {
  const check = (facts: RequestFacts) => {
    // @ts-expect-error the URL the rules were matched on is fixed
    facts.url = new URL("https://elsewhere.test/");
    // @ts-expect-error set only by the facts' own JWT check
    facts.jwksUnavailable = undefined;
  };
  expect(check).toBeTypeOf("function");
});

it("names every option once, with one default each: overrides are read only when asked for", () => {
  const settings = parseMiddlewareSettings({ rules: [] });
  expect(settings).toMatchObject({ overrides: false, cluster: false, leases: "on", prefix: "rl" });
  expect(parseMiddlewareSettings({ rules: [], overrides: true }).overrides).toBe(true);
  // Every name the typed options have is taken (src/middleware/index.ts checks they are the same at compile time).
  expect(() =>
    parseMiddlewareSettings(Object.fromEntries(MIDDLEWARE_OPTIONS.map((name) => [name, undefined]))),
  ).not.toThrow();
  expect(() => parseMiddlewareSettings({ rules: [], timeout: 5 })).toThrow(/timeout: unknown option/);
});
