// Action rules and the request-fact match fields (docs/lists.md): how `ip`, `country`, `asn` and `user_agent`
// match, what a config may not say (each refused naming its field), and the addresses and CIDRs the IP set
// holds, IPv4-mapped IPv6 included.
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../src/config/errors";
import { parseRuleSet } from "../../src/config/rules";
import { RequestFacts } from "../../src/identity";
import { IpSet } from "../../src/rules/ip-set";
import { compileMatch } from "../../src/rules/match";
import { addressBits, formatPrefix, type Prefix, parsePrefix } from "../../src/util/address";

const LABEL = "RATE_LIMIT_RULES";

/** The problems a config error lists for `rules`, or [] when they are valid. */
function problemsOf(rules: object[]): string[] {
  try {
    parseRuleSet(rules, { label: LABEL, jwtVerifiable: false });
    return [];
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return [...error.problems];
  }
}

/** Whether a request with these facts matches `match` (as the limiter asks). */
function matches(match: object, facts: { ip?: string; cf?: object; ua?: string }): boolean {
  const [rule] = parseRuleSet([{ name: "r", action: "deny", match }], {
    label: LABEL,
    jwtVerifiable: false,
  }).actions;
  const headers: Record<string, string> = {};
  if (facts.ip !== undefined) headers["cf-connecting-ip"] = facts.ip;
  if (facts.ua !== undefined) headers["user-agent"] = facts.ua;
  const request = new Request("https://edge.test/x", { headers });
  if (facts.cf) Object.defineProperty(request, "cf", { value: facts.cf });
  const target = new RequestFacts(request, { clientIpHeader: "cf-connecting-ip" });
  return compileMatch(rule?.match ?? {})("GET", target);
}

describe("match.ip", () => {
  it("matches an address inside a listed CIDR or equal to a listed address, in either family", () => {
    const match = { ip: ["203.0.113.0/24", "198.51.100.7", "2001:db8::/32"] };
    expect(matches(match, { ip: "203.0.113.200" })).toBe(true);
    expect(matches(match, { ip: "198.51.100.7" })).toBe(true);
    expect(matches(match, { ip: "2001:DB8:0:0:0:0:0:5" })).toBe(true);
    expect(matches(match, { ip: "203.0.114.1" })).toBe(false);
    expect(matches(match, { ip: "198.51.100.8" })).toBe(false);
    expect(matches(match, { ip: "2001:db9::1" })).toBe(false);
    expect(matches(match, {})).toBe(false); // no trusted IP: not taken in
  });

  it("takes an IPv4-mapped IPv6 address as its IPv4 form, in the client and in the entry", () => {
    expect(matches({ ip: ["203.0.113.0/24"] }, { ip: "::ffff:203.0.113.9" })).toBe(true);
    expect(matches({ ip: ["::ffff:203.0.113.9"] }, { ip: "203.0.113.9" })).toBe(true);
    expect(matches({ ip: ["::ffff:203.0.113.0/120"] }, { ip: "203.0.113.77" })).toBe(true);
    expect(matches({ ip: ["::ffff:203.0.113.0/120"] }, { ip: "203.0.112.77" })).toBe(false);
  });

  it("refuses what is not an address or a CIDR, naming the entry", () => {
    const problems = problemsOf([
      {
        name: "r",
        action: "deny",
        match: { ip: ["203.0.113.0/33", "203.0.113.7/24", "300.1.1.1", "2001:db8::/129", []] },
      },
    ]);
    expect(problems).toEqual([
      `${LABEL}[0].match.ip[0]: "203.0.113.0/33" has no valid prefix length (0..32 after "/")`,
      `${LABEL}[0].match.ip[1]: "203.0.113.7/24" has host bits set (the network is 203.0.113.0/24)`,
      `${LABEL}[0].match.ip[2]: "300.1.1.1" is not an IP address or CIDR`,
      `${LABEL}[0].match.ip[3]: "2001:db8::/129" has no valid prefix length (0..128 after "/")`,
      `${LABEL}[0].match.ip[4]: [] is not an IP address or CIDR`,
    ]);
  });
});

describe("match.country, match.asn, match.user_agent", () => {
  it("match Cloudflare's request.cf facts; a request without them is not taken in", () => {
    expect(matches({ country: ["de", "FR"] }, { cf: { country: "DE" } })).toBe(true);
    expect(matches({ country: ["DE"] }, { cf: { country: "US" } })).toBe(false);
    expect(matches({ country: ["DE"] }, {})).toBe(false);
    expect(matches({ asn: [64500] }, { cf: { asn: 64500 } })).toBe(true);
    expect(matches({ asn: [64500] }, { cf: { asn: 64501 } })).toBe(false);
    expect(matches({ country: ["DE"], asn: [64500] }, { cf: { country: "DE", asn: 1 } })).toBe(false);
  });

  it("match User-Agent globs case-insensitively, `*` any characters, `:` literal", () => {
    const match = { user_agent: ["*curl*", "python-requests/*", "bot:*"] };
    expect(matches(match, { ua: "curl/8.4.0" })).toBe(true);
    expect(matches(match, { ua: "Mozilla/5.0 libCURL" })).toBe(true);
    expect(matches(match, { ua: "Python-Requests/2.31" })).toBe(true);
    expect(matches(match, { ua: "bot:x/y" })).toBe(true);
    expect(matches(match, { ua: "botx/y" })).toBe(false);
    expect(matches(match, { ua: "Mozilla/5.0" })).toBe(false);
    expect(matches(match, {})).toBe(false);
  });

  it("match a hostile User-Agent in time linear in its length", () => {
    const match = { user_agent: ["*a*a*a*a*a*a*a*a*a*a*b"] };
    const started = performance.now();
    expect(matches(match, { ua: "a".repeat(8000) })).toBe(false);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it("refuse bad values naming the field", () => {
    const problems = problemsOf([
      { name: "r", action: "deny", match: { country: ["Germany"], asn: [-1], user_agent: [], list: "a b" } },
    ]);
    expect(problems).toEqual([
      `${LABEL}[0].match.country[0]: "Germany" is not a two-character country code (e.g. "DE")`,
      `${LABEL}[0].match.asn[0]: -1 is not an AS number (a whole number from 0 to 4294967295)`,
      `${LABEL}[0].match.user_agent: an empty list matches no request (leave the field out to match every request)`,
      `${LABEL}[0].match.list: "a b" is not a list name ([A-Za-z0-9_-]{1,64})`,
    ]);
  });
});

describe("an action rule", () => {
  it("is kept with its place among the counting rules", () => {
    const { rules, actions } = parseRuleSet(
      [
        { name: "partners", action: "allow", match: { ip: ["198.51.100.0/24"] } },
        { name: "count", key: "ip", algorithm: "fixed-window", limit: 1, period: "1m" },
        { name: "bad", action: "deny", match: { user_agent: ["*curl*"] }, mode: "monitor" },
      ],
      { label: LABEL, jwtVerifiable: false },
    );
    expect(rules.map((r) => r.name)).toEqual(["count"]);
    expect(actions.map((a) => [a.name, a.action, a.before, a.mode])).toEqual([
      ["partners", "allow", 0, undefined],
      ["bad", "deny", 1, "monitor"],
    ]);
  });

  it("has an action or an algorithm, not both, and no counting field; names are unique across kinds", () => {
    expect(
      problemsOf([
        { name: "a", action: "deny", algorithm: "fixed-window", limit: 5, period: "1m" },
        { name: "b", action: "block" },
        { name: "b", key: "ip", algorithm: "fixed-window", limit: 1, period: "1m" },
      ]),
    ).toEqual([
      `${LABEL}[0].action: a rule has an action or an algorithm, not both (an action rule counts nothing)`,
      `${LABEL}[0].limit: an action rule counts nothing, so it has no limit (only rules with an algorithm do)`,
      `${LABEL}[0].period: an action rule counts nothing, so it has no period (only rules with an algorithm do)`,
      `${LABEL}[1].action: "block" is not one of deny | allow`,
      `${LABEL}[2].name: "b" is already used by ${LABEL}[1]`,
    ]);
  });
});

describe("the IP set", () => {
  const prefix = (text: string) => parsePrefix(text) as Prefix;
  const bits = (text: string) => addressBits(text) as NonNullable<ReturnType<typeof addressBits>>;

  it("holds prefixes of any length, /0 included, and only until each expires", () => {
    const set = new IpSet();
    set.add(prefix("10.0.0.0/8"), 2000);
    set.add(prefix("2001:db8:1::/48"));
    set.add(prefix("2001:db8:1:2::/64"), 1000);
    expect(set.has(bits("10.200.3.4"), 1999)).toBe(true);
    expect(set.has(bits("10.200.3.4"), 2000)).toBe(false);
    expect(set.has(bits("2001:db8:1:ffff::1"), 5000)).toBe(true);
    expect(set.has(bits("2001:db8:2::1"), 0)).toBe(false);
    expect(set.has(bits("11.0.0.1"), 0)).toBe(false);
    set.add(prefix("0.0.0.0/0"));
    expect(set.has(bits("11.0.0.1"), 0)).toBe(true);
    expect(set.has(bits("2001:db8:2::1"), 0)).toBe(false); // an IPv4 /0 is no IPv6 address
    expect(set.size).toBe(4);
  });

  it("writes every entry in one canonical form", () => {
    for (const [written, canonical] of [
      ["2001:DB8:0:0::/32", "2001:db8::/32"],
      ["::ffff:203.0.113.9", "203.0.113.9"],
      ["::ffff:203.0.113.0/120", "203.0.113.0/24"],
      ["203.0.113.9/32", "203.0.113.9"],
      ["0.0.0.0/0", "0.0.0.0/0"],
      ["::/0", "::/0"],
    ]) {
      expect(formatPrefix(prefix(written as string)), written).toBe(canonical);
    }
  });
});
