// A rule's `match.path` (src/rules/match.ts, docs/matching.md): what it matches, checked against an obviously
// correct (and exponential) reference, and how long it takes on paths written to make a regex backtrack.
// The times asserted here are bounds on work that is linear in the path (about 0.2 ms for the slowest 16 KB
// case here on an idle machine). The bound, LINEAR_MS, sits two orders of magnitude above that and an order
// below what a quadratic matcher spends on 16 KB (16,384² steps: hundreds of ms; a backtracking one takes
// seconds), so it tells them apart on a loaded 2-core box without flaking.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseRules } from "../../src/config/rules";
import { RequestFacts } from "../../src/identity";
import { compilePath, compileRules } from "../../src/rules/match";

/** The pattern's tokens as the contract reads them: `*`, `:name`, and literal text. */
type Token = { kind: "literal"; text: string } | { kind: "star" } | { kind: "param" };

function tokensOf(pattern: string): Token[] {
  return pattern
    .split(/(\*|:[A-Za-z_][A-Za-z0-9_]*)/)
    .filter((part) => part !== "")
    .map((part): Token => {
      if (part === "*") return { kind: "star" };
      if (part.startsWith(":")) return { kind: "param" };
      return { kind: "literal", text: part };
    });
}

/**
 * The reference: `*` is any characters (`/` too), `:name` one or more characters other than `/`, the rest
 * literal, the whole path matched. Tries every split, each (token, position) once (remembered: without it a
 * long pattern with many stars that does not match takes exponential time, a minute for some random ones),
 * so it is polynomial: only for short paths.
 */
function reference(pattern: string, path: string): boolean {
  const tokens = tokensOf(pattern);
  const known = new Map<number, boolean>(); // t * (path.length + 1) + i -> from(t, i)
  const from = (t: number, i: number): boolean => {
    const at = t * (path.length + 1) + i;
    let matched = known.get(at);
    if (matched === undefined) {
      matched = split(t, i);
      known.set(at, matched);
    }
    return matched;
  };
  const split = (t: number, i: number): boolean => {
    const token = tokens[t];
    if (token === undefined) return i === path.length;
    if (token.kind === "literal") return path.startsWith(token.text, i) && from(t + 1, i + token.text.length);
    if (token.kind === "star") {
      for (let j = i; j <= path.length; j++) if (from(t + 1, j)) return true;
      return false;
    }
    for (let j = i + 1; j <= path.length && path[j - 1] !== "/"; j++) if (from(t + 1, j)) return true;
    return false;
  };
  return from(0, 0);
}

/** The most one linear match of a 16 KB path may take here, fastest of a few calls (see the header). */
const LINEAR_MS = 20;

/**
 * Milliseconds one call of `fn` takes: the fastest of `repeats` calls, which is the work itself without the
 * preemptions and GC pauses a loaded machine adds to some calls (and the first call's unoptimized code). The
 * work is deterministic, so its fastest run is its cost; a backtracking matcher's fastest run is still seconds.
 */
function fastestMs(fn: () => unknown, repeats = 5): number {
  let fastest = Number.POSITIVE_INFINITY;
  for (let r = 0; r < repeats; r++) {
    const start = performance.now();
    fn();
    fastest = Math.min(fastest, performance.now() - start);
  }
  return fastest;
}

describe("the attacks: a path pattern on paths written to make a regex backtrack", () => {
  // The attacks as reported: each took seconds of CPU before, in workerd and in Node. A near miss is the
  // costly case for a backtracking matcher (it tries every split before it gives up): 3,000 dots and a `/`
  // took the old regex about as long as the reported 12,000-dot request did in workerd (~19 s).
  it("/v/:a.:b.:c against /v/ and 12,000 dots, and a near miss", () => {
    const matcher = compilePath("/v/:a.:b.:c");
    const start = performance.now();
    expect(matcher.test(`/v/${".".repeat(12_000)}`)).toBe(true); // ".", "." and the rest: three parts
    expect(matcher.test(`/v/${".".repeat(3_000)}/`)).toBe(false);
    expect(performance.now() - start).toBeLessThan(50);
  });

  it("/f/:a-:b-:c against 3 KB of dashes", () => {
    const matcher = compilePath("/f/:a-:b-:c");
    const start = performance.now();
    expect(matcher.test(`/f/${"-".repeat(3_000)}/`)).toBe(false);
    expect(performance.now() - start).toBeLessThan(50);
  });

  it("/a/*/*/*/z against a 4 KB path", () => {
    const matcher = compilePath("/a/*/*/*/z");
    const start = performance.now();
    expect(matcher.test(`/a/${"x/".repeat(2_000)}y`)).toBe(false);
    expect(performance.now() - start).toBeLessThan(50);
  });
});

describe("every shape of path pattern on the paths that hurt a backtracking matcher", () => {
  // Every shape a pattern can take, against the paths that hurt a backtracking matcher most: long runs of
  // the characters the pattern's literals are made of, a near miss at the end.
  const shapes = [
    "/v/:a.:b.:c",
    "/f/:a-:b-:c-:d-:e",
    "/:a:b:c:d",
    "/a/*/*/*/*/*/z",
    "/*a*a*a*a*a*b",
    "*/*/*/*/*/*/*/x",
    "/*:a*:b*:c/z",
    "/x/:a/*/:b/*/:c/y",
    "/s/*.*.*.*.json",
    "/:a.*.:b.*.:c!",
    "/api/v1/users/:id/posts/:post/comments/*/reactions/:kind-:n.:fmt",
  ];
  const nearMisses = (size: number): string[] => [
    `/${".".repeat(size)}`,
    `/v/${".".repeat(size)}/`,
    `/f/${"-".repeat(size)}/`,
    `/a/${"/".repeat(size)}`,
    `/${"a".repeat(size)}`,
    `/${"a/".repeat(size / 2)}`,
    `/x/${"a/".repeat(size / 2)}`,
    `/s/${".".repeat(size)}json`,
    `/${"a.".repeat(size / 2)}`,
    `/api/v1/users/${"a-".repeat(size / 2)}/posts/`,
  ];

  it("no shape takes more than linear time on a 16 KB path (fastest of 5)", () => {
    let worst = { ms: 0, pattern: "", path: "" };
    for (const pattern of shapes) {
      const matcher = compilePath(pattern);
      for (const path of nearMisses(16_384)) {
        const ms = fastestMs(() => matcher.test(path));
        if (ms > worst.ms) worst = { ms, pattern, path: `${path.slice(0, 20)}… (${path.length})` };
      }
    }
    expect(worst.ms, `${worst.pattern} on ${worst.path}`).toBeLessThan(LINEAR_MS);
  });
});

describe("a path pattern matches what the reference matches", () => {
  // Small alphabets on both sides, so that literals, separators and wildcards meet often.
  const piece = fc.constantFrom("a", "b", "/", "-", ".", "ab", "/a", "*", ":p", ":q");
  const pattern = fc.array(piece, { maxLength: 7 }).map((pieces) => `/${pieces.join("")}`);
  const path = fc
    .array(fc.constantFrom("a", "b", "/", "-", "."), { maxLength: 12 })
    .map((chars) => `/${chars.join("")}`);

  it("on random patterns and paths", () => {
    fc.assert(
      fc.property(pattern, path, (p, s) => compilePath(p).test(s) === reference(p, s)),
      { numRuns: 20_000 },
    );
  });

  it("with the options a rule can set: an optional trailing slash, either case", () => {
    const bare = (p: string) => (p.length > 1 && p.endsWith("/") ? p.slice(0, -1) : p);
    const mixedPath = fc
      .array(fc.constantFrom("a", "A", "b", "/", "-", "."), { maxLength: 12 })
      .map((chars) => `/${chars.join("")}`);
    fc.assert(
      fc.property(pattern, mixedPath, (p, s) => {
        const slashOptional = compilePath(p, { optionalTrailingSlash: true }).test(s);
        const expected =
          reference(bare(p), s) || (s.length > 1 && s.endsWith("/") && reference(bare(p), bare(s)));
        const anyCase = compilePath(p.toUpperCase().replace(/:([PQ])/g, ":p"), { caseInsensitive: true });
        return slashOptional === expected && anyCase.test(s) === reference(p, s.toLowerCase());
      }),
      { numRuns: 20_000 },
    );
  });

  /** A pattern, and a path made from it by filling its wildcards: matches are likely, near misses too. */
  const filledFrom = (patterns: fc.Arbitrary<string>) =>
    patterns.chain((p) =>
      fc
        .array(fc.constantFrom("", "a", "b/a", "-", ".", "//"), { minLength: 8, maxLength: 8 })
        .map((fills) => {
          let i = 0;
          return [p, p.replace(/\*|:[pq]/g, () => fills[i++ % fills.length] as string)] as const;
        }),
    );

  it("on paths built from the pattern itself (where matches are likely)", () => {
    fc.assert(
      fc.property(filledFrom(pattern), ([p, s]) => compilePath(p).test(s) === reference(p, s)),
      { numRuns: 20_000 },
    );
  });

  it("on long patterns (more automaton states than one 32-bit word holds)", () => {
    const long = fc.array(piece, { minLength: 24, maxLength: 48 }).map((pieces) => `/${pieces.join("")}`);
    fc.assert(
      fc.property(filledFrom(long), ([p, s]) => compilePath(p).test(s) === reference(p, s)),
      { numRuns: 3_000 },
    );
    fc.assert(
      fc.property(long, path, (p, s) => compilePath(p).test(s) === reference(p, s)),
      { numRuns: 3_000 },
    );
  });
});

describe("a fuzz run: random patterns × random paths up to 16 KB", () => {
  it("never spends more than linear time on one match (fastest of 3 per pair)", () => {
    const piece = fc.constantFrom("a", "/", "-", ".", "/a/", "*", ":p", ".json", "x");
    const pattern = fc.array(piece, { minLength: 1, maxLength: 12 }).map((pieces) => `/${pieces.join("")}`);
    // A path is a unit repeated up to 16 KB, with a tail that may or may not let it match.
    const path = fc
      .tuple(
        fc.constantFrom(".", "-", "/", "a", "a/", "a.", "/.", "-a", "a-/"),
        fc.integer({ min: 1, max: 16_384 }),
        fc.constantFrom("", "/", "x", ".json", "/a"),
      )
      .map(([unit, size, tail]) => `/${unit.repeat(Math.ceil(size / unit.length)).slice(0, size)}${tail}`);
    const pairs = fc.sample(fc.tuple(pattern, path), { numRuns: 400, seed: 20261128 });
    let worst = { ms: 0, what: "" };
    let matched = 0;
    for (const [p, s] of pairs) {
      const matcher = compilePath(p);
      if (matcher.test(s)) matched++;
      const ms = fastestMs(() => matcher.test(s), 3);
      if (ms > worst.ms) worst = { ms, what: `${p} on ${s.slice(0, 16)}… (${s.length})` };
    }
    expect(matched).toBeGreaterThan(0); // the run covers matches as well as misses
    expect(worst.ms, worst.what).toBeLessThan(LINEAR_MS);
  });
});

describe("a rule's whole match on a 16 KB URL", () => {
  it("takes linear time with every reading of the path (canonical, as sent, without ; or /)", () => {
    const rules = compileRules(
      parseRules(
        ["/v/:a.:b.:c", "/f/:a-:b-:c/*", "/a/*/*/*/z", "/x/:id"].map((path, i) => ({
          name: `r${i}`,
          match: { methods: ["DELETE"], path, case_insensitive: i % 2 === 0 },
          key: "ip",
          algorithm: "fixed-window",
          limit: 1,
          period: "1m",
        })),
        { label: "RATE_LIMIT_RULES", jwtVerifiable: false },
      ),
    );
    const urls = [
      `/v/${".%2E".repeat(5_000)}%2F`,
      `/f/${"-;a=-".repeat(3_000)}/`,
      `/a/${"x%2F/".repeat(3_000)}y/`,
      `/x/${"%41".repeat(5_000)}//`,
    ];
    let worst = 0;
    for (const url of urls) {
      const ms = fastestMs(() => {
        // A request's facts are read once per request, then every rule is tested.
        const request = new RequestFacts(
          new Request(`https://edge.test${url}`, { method: "POST", headers: { "X-HTTP-Method": "DELETE" } }),
          { clientIpHeader: "cf-connecting-ip" },
        );
        for (const rule of rules) rule.matches("POST", request);
      });
      worst = Math.max(worst, ms / rules.length);
    }
    expect(worst).toBeLessThan(LINEAR_MS);
  });
});
