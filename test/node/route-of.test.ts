// The paths the dashboard lists per rule (src/observability/metrics.ts routeOf): a route, never a client's id,
// address, email or token.
import { describe, expect, it } from "vitest";
import { routeOf } from "../../src/observability/metrics";

describe("a denied request's path as the dashboard lists it", () => {
  it.each([
    ["https://api.test/api/users/8812/orders?key=secret", "/api/users/:id/orders"],
    ["https://api.test/ip/203.0.113.5", "/ip/:id"],
    ["https://api.test/ip/2001:db8::1/info", "/ip/:id/info"],
    ["https://api.test/users/alice@example.com", "/users/:id"],
    ["https://api.test/users/alice%40example.com", "/users/:id"],
    ["https://api.test/keys/3f9a0c12aa", "/keys/:id"],
    ["https://api.test/t/sk_live_abcdefghijklmnopqrstuvwx", "/t/:id"],
    ["https://api.test/files/report-2026.pdf", "/files/:id"],
  ])("%s lists as %s", (url, route) => {
    expect(routeOf(url)).toBe(route);
  });

  it("keeps the words of a route, a short version among them", () => {
    expect(routeOf("https://api.test/api/v2/users/me")).toBe("/api/v2/users/me");
    expect(routeOf("https://api.test/")).toBe("/");
  });

  it("never carries the query string and stays short", () => {
    expect(routeOf("https://api.test/search?q=203.0.113.5")).toBe("/search");
    expect(routeOf(`https://api.test/${"word/".repeat(60)}`).length).toBeLessThanOrEqual(121);
  });
});
