// The masked hint the dashboard may show beside a hashed identity (src/identity/show.ts, docs/operating.md
// "Hints"): enough to recognise a client or block its network upstream, never enough to be the identity.
import { describe, expect, it } from "vitest";
import { maskIdentity } from "../../src/identity/show";

describe("an identity's masked hint", () => {
  it("keeps an IPv4 address's /24 and an IPv6 address's first two groups", () => {
    expect(maskIdentity("203.0.113.77")).toBe("203.0.113.x");
    expect(maskIdentity("2001:db8:85a3::8a2e:370:7334")).toBe("2001:db8:…");
    expect(maskIdentity("2001:db8:1:2::/64")).toBe("2001:db8:…");
  });

  it("keeps at most three characters of anything else, and never more than a third of it", () => {
    expect(maskIdentity("mallory@example.com")).toBe("mal…");
    expect(maskIdentity("sk_live_7Qx9sKz2")).toBe("sk_…");
    expect(maskIdentity("bob")).toBe("b…");
    expect(maskIdentity("ab")).toBe("…");
    expect(maskIdentity("acme%7Cprod|203.0.113.7")).toBe("acm…");
    // Characters, not UTF-16 halves: an emoji is never cut in two.
    expect(maskIdentity("😀😀😀😀😀😀")).toBe("😀😀…");
  });
});
