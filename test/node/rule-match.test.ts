// Which rules a request matches (src/rules/match.ts, docs/matching.md): the trailing slash, the case of a path,
// tunnelled methods, and the configs that could never match, refused with the field named.
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../src/config/errors";
import { parseRules } from "../../src/config/rules";
import { RequestFacts } from "../../src/identity";
import { compileRules } from "../../src/rules/match";

const LABEL = "RATE_LIMIT_RULES";

/** One fixed-window rule per `match`, named r0, r1, …. */
const rulesOf = (...matches: object[]) =>
  matches.map((match, i) => ({
    name: `r${i}`,
    match,
    key: "ip",
    algorithm: "fixed-window",
    limit: 1,
    period: "1m",
  }));

/** The names of the rules of `matches` that a request matches, as the limiter asks (src/middleware/limiter.ts). */
function matcher(...matches: object[]) {
  const compiled = compileRules(parseRules(rulesOf(...matches), { label: LABEL, jwtVerifiable: false }));
  return (method: string, path: string, headers: Record<string, string> = {}) => {
    const request = new RequestFacts(new Request(`https://edge.test${path}`, { method, headers }), {
      clientIpHeader: "cf-connecting-ip",
    });
    return compiled.filter((r) => r.matches(method, request)).map((r) => r.rule.name);
  };
}

/** The problems a config error lists for `matches`, or [] when it is valid. */
function problemsOf(...matches: object[]): string[] {
  try {
    parseRules(rulesOf(...matches), { label: LABEL, jwtVerifiable: false });
    return [];
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return [...error.problems];
  }
}

describe("a trailing slash", () => {
  it("is the same path: /login/ and /login%2F are /login (Express, ASP.NET Core, Rails route them alike)", () => {
    const matched = matcher({ methods: ["POST"], path: "/login" });
    for (const path of ["/login", "/login/", "/login%2F", "/login%2f", "/login//", "/%6Cogin/"]) {
      expect(matched("POST", path), path).toEqual(["r0"]);
    }
    expect(matched("POST", "/login/x")).toEqual([]);
    expect(matched("POST", "/loginx")).toEqual([]);
  });

  it("does not take a request past a one-segment parameter: /files/a/ is /files/a", () => {
    const matched = matcher({ path: "/files/:name" });
    expect(matched("GET", "/files/a/")).toEqual(["r0"]);
    expect(matched("GET", "/files/a%2F")).toEqual(["r0"]);
    expect(matched("GET", "/files/a/b")).toEqual([]);
    expect(matched("GET", "/files/")).toEqual([]);
  });

  it("written in the pattern, matches the path without it too; the root stays the root", () => {
    const matched = matcher({ path: "/docs/" }, { path: "/" });
    expect(matched("GET", "/docs")).toEqual(["r0"]);
    expect(matched("GET", "/docs/")).toEqual(["r0"]);
    expect(matched("GET", "/")).toEqual(["r1"]);
  });

  it("makes another path under strict_slash = true", () => {
    const matched = matcher({ path: "/login", strict_slash: true }, { path: "/dir/", strict_slash: true });
    expect(matched("GET", "/login")).toEqual(["r0"]);
    expect(matched("GET", "/login/")).toEqual([]);
    expect(matched("GET", "/login%2F")).toEqual([]);
    expect(matched("GET", "/dir/")).toEqual(["r1"]);
    expect(matched("GET", "/dir")).toEqual([]);
  });
});

describe("case_insensitive = true", () => {
  it("matches a path in any case; without it, case tells paths apart", () => {
    const matched = matcher({ path: "/Admin/:id/*" }, { path: "/admin/:id/*", case_insensitive: true });
    expect(matched("GET", "/Admin/1/x")).toEqual(["r0", "r1"]);
    expect(matched("GET", "/ADMIN/1/X")).toEqual(["r1"]);
    expect(matched("GET", "/%41dmin/1/x")).toEqual(["r0", "r1"]); // an escaped letter is the letter
    expect(matched("GET", "/admins/1/x")).toEqual([]);
  });
});

describe("a tunnelled method", () => {
  const tunnels: [string, Record<string, string>][] = [
    ["/items/1", { "X-HTTP-Method-Override": "DELETE" }],
    ["/items/1", { "X-HTTP-Method": "delete" }],
    ["/items/1", { "X-Method-Override": " DELETE " }],
    ["/items/1?_method=DELETE", {}],
    ["/items/1?%5Fmethod=delete", {}],
    ["/items/1", { "X-HTTP-Method-Override": "PUT, DELETE" }],
  ];

  it("counts under a rule for the method it names, as well as under its own", () => {
    const matched = matcher(
      { methods: ["DELETE"], path: "/items/*" },
      { methods: ["POST"], path: "/items/*" },
    );
    for (const [path, headers] of tunnels) {
      expect(matched("POST", path, headers), JSON.stringify([path, headers])).toEqual(["r0", "r1"]);
    }
    expect(matched("POST", "/items/1")).toEqual(["r1"]);
    expect(matched("POST", "/items/1?method=DELETE", { "X-Other": "DELETE" })).toEqual(["r1"]);
  });

  it("a GET tunnelled as HEAD or a HEAD as GET is still a GET rule's", () => {
    const matched = matcher({ methods: ["GET"] });
    expect(matched("POST", "/", { "X-HTTP-Method-Override": "HEAD" })).toEqual(["r0"]);
  });

  it("counts under its own method only with method_override = false", () => {
    const matched = matcher({ methods: ["DELETE"], path: "/items/*", method_override: false });
    for (const [path, headers] of tunnels) expect(matched("POST", path, headers)).toEqual([]);
    expect(matched("DELETE", "/items/1")).toEqual(["r0"]);
  });
});

describe("a match that could never apply", () => {
  it("is a config error naming the field", () => {
    expect(problemsOf({ methods: [] })).toEqual([
      `${LABEL}[0].match.methods: an empty list matches no request (leave methods out to match every method)`,
    ]);
    expect(problemsOf({ path: "/search?q=*" })[0]).toMatch(
      /^RATE_LIMIT_RULES\[0\]\.match\.path: "\/search\?q=\*" never matches: it contains "\?"/,
    );
    expect(problemsOf({ path: "/page#top" })[0]).toMatch(
      /^RATE_LIMIT_RULES\[0\]\.match\.path: .*contains "#"/,
    );
    expect(problemsOf({ path: "/a/../b" })[0]).toMatch(
      /^RATE_LIMIT_RULES\[0\]\.match\.path: .*a "\.\." segment/,
    );
    expect(problemsOf({ path: "/a/./b" })[0]).toMatch(/\.match\.path: .*a "\." segment/);
    expect(problemsOf({ path: "/a/.." })).toHaveLength(1);
  });

  it("is not a pattern that merely looks alike", () => {
    expect(problemsOf({ path: "/a/..b/.c/%3F/x.y" }, { methods: ["GET"] })).toEqual([]);
  });

  it("and the new fields take only true or false, naming the field", () => {
    expect(
      problemsOf({ path: "/a", strict_slash: "yes", case_insensitive: 1, method_override: null }),
    ).toEqual([
      `${LABEL}[0].match.strict_slash: "yes" is not true or false`,
      `${LABEL}[0].match.case_insensitive: 1 is not true or false`,
      `${LABEL}[0].match.method_override: null is not true or false`,
    ]);
  });
});
