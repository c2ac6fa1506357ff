/**
 * A rule's `match.path` pattern, compiled into a matcher whose time is linear in the path, whatever the path
 * (docs/matching.md). `*` matches any characters, `/` included; `:name` matches one or more characters other
 * than `/` (one segment, or a part of one: `/v/:a.:b`); everything else is literal. A regex of `.*` and
 * `[^/]+` backtracks: one URL of a few thousand characters held a Worker's CPU for seconds.
 *
 * The pattern is split into a literal prefix, a literal suffix and the middle between its first and last
 * wildcard. The prefix and suffix are compared as strings; the middle runs as a nondeterministic automaton
 * simulated bit-parallel (Shift-And): state i = "the first i atoms of the middle matched", every state kept
 * at once in the bits of a few 32-bit words, one step per character. Time: O(path length × ⌈states / 32⌉).
 */

/** A compiled path pattern. */
export interface PathMatcher {
  /** Whether the whole of `path` matches. */
  test(path: string): boolean;
}

/** How a pattern is read. */
export interface PathOptions {
  /** ASCII letters match either case. @default false */
  caseInsensitive?: boolean;
  /**
   * One trailing slash, on the pattern or the path, makes no other path: `/login` and `/login/` match each
   * other (the root `/` stays itself). @default false
   */
  optionalTrailingSlash?: boolean;
  /** `:name` matches one segment; `false`: it is literal text, `*` the only wildcard (a glob). @default true */
  params?: boolean;
}

/** A pattern's wildcards; `:` followed by anything else is literal (`/a:/b`, `/t/:1`). */
const WILDCARDS = /(\*|:[A-Za-z_][A-Za-z0-9_]*)/;

const SLASH = 47;
/** Rows of the advance table: one per ASCII code, and one for every other character. */
const ROWS = 129;

/** One atom of a pattern's middle: a literal character (its code), any run of characters, or a segment part. */
type Atom = number | "star" | "param";

/** Tests `path[0, end)`, the whole path or the path without its trailing slash. */
type PrefixTest = (path: string, end: number) => boolean;

/** Compiles `pattern` once (per rule); the matcher is then used for every request. */
export function compilePath(pattern: string, options: PathOptions = {}): PathMatcher {
  const { caseInsensitive = false, optionalTrailingSlash = false, params = true } = options;
  const written = caseInsensitive ? pattern.toLowerCase() : pattern;
  const testUpTo = prefixTester(
    atomsOf(optionalTrailingSlash ? withoutTrailingSlash(written) : written, params),
  );
  return {
    test(sent) {
      const path = caseInsensitive ? sent.toLowerCase() : sent;
      const end = path.length;
      if (testUpTo(path, end)) return true;
      return (
        optionalTrailingSlash && end > 1 && path.charCodeAt(end - 1) === SLASH && testUpTo(path, end - 1)
      );
    },
  };
}

const withoutTrailingSlash = (pattern: string): string =>
  pattern.length > 1 && pattern.endsWith("/") ? pattern.slice(0, -1) : pattern;

/** The test of a pattern's atoms: its literal prefix and suffix as strings, the middle as an automaton. */
function prefixTester(atoms: Atom[]): PrefixTest {
  const first = atoms.findIndex((atom) => typeof atom !== "number");
  const literal = (from: number, to: number) => String.fromCharCode(...(atoms.slice(from, to) as number[]));
  if (first === -1) {
    const whole = literal(0, atoms.length);
    return (path, end) => end === whole.length && path.startsWith(whole);
  }
  let last = atoms.length - 1;
  while (last > first && typeof atoms[last] === "number") last--;
  const prefix = literal(0, first);
  const suffix = literal(last + 1, atoms.length);
  const middle = atoms.slice(first, last + 1);
  const minLength = prefix.length + suffix.length + middle.filter((atom) => atom !== "star").length;
  const testMiddle = middleTester(middle);
  return (path, end) =>
    end >= minLength &&
    path.startsWith(prefix) &&
    path.endsWith(suffix, end) &&
    testMiddle(path, prefix.length, end - suffix.length);
}

/** The atoms of a pattern: consecutive `*` are one (`**` matches what `*` does). */
function atomsOf(pattern: string, params: boolean): Atom[] {
  const atoms: Atom[] = [];
  for (const token of pattern.split(WILDCARDS)) {
    if (token === "*") {
      if (atoms.at(-1) !== "star") atoms.push("star");
    } else if (params && token.startsWith(":") && token.length > 1) atoms.push("param");
    else for (let i = 0; i < token.length; i++) atoms.push(token.charCodeAt(i));
  }
  return atoms;
}

/** Tests `path[from, to)` against a middle (it starts and ends with a wildcard). */
type MiddleTest = (path: string, from: number, to: number) => boolean;

function middleTester(middle: Atom[]): MiddleTest {
  // The shapes most rules have (`/api/*`, `/users/:id`, `/users/:id/posts`) need no automaton.
  if (middle.length === 1 && middle[0] === "star") return () => true;
  if (middle.length === 1 && middle[0] === "param") {
    return (path, from, to) => {
      const slash = path.indexOf("/", from);
      return slash === -1 || slash >= to;
    };
  }
  return automaton(middle);
}

/**
 * The Shift-And simulation. Atom i moves state i to i+1: a literal on its character, a param on any character
 * but `/` (and state i+1 then loops on any character but `/`: one or more), a star without a character (an
 * epsilon move, and state i+1 loops on any character: zero or more). Stars are never adjacent (atomsOf), so one
 * epsilon step after each character closes the set.
 */
function automaton(middle: Atom[]): MiddleTest {
  const states = middle.length + 1;
  const words = Math.ceil(states / 32);
  const advance = new Int32Array(ROWS * words);
  const loopOnSlash = new Int32Array(words);
  const loopOnOther = new Int32Array(words);
  const epsilon = new Int32Array(words);
  const set = (table: Int32Array, offset: number, state: number) => {
    table[offset + (state >>> 5)] = (table[offset + (state >>> 5)] as number) | (1 << (state & 31));
  };
  middle.forEach((atom, i) => {
    if (atom === "star") {
      set(epsilon, 0, i);
      set(loopOnSlash, 0, i + 1);
      set(loopOnOther, 0, i + 1);
    } else if (atom === "param") {
      for (let row = 0; row < ROWS; row++) if (row !== SLASH) set(advance, row * words, i);
      set(loopOnOther, 0, i + 1);
    } else if (atom < 128) set(advance, atom * words, i); // a non-ASCII literal: no path has one (URL-encoded)
  });
  const acceptWord = (states - 1) >>> 5;
  const acceptBit = 1 << ((states - 1) & 31);
  const start = 1 | (((epsilon[0] as number) & 1) << 1);

  if (words === 1) {
    const eps = epsilon[0] as number;
    const slashLoop = loopOnSlash[0] as number;
    const otherLoop = loopOnOther[0] as number;
    return (path, from, to) => {
      let d = start;
      for (let i = from; i < to; i++) {
        const c = path.charCodeAt(i);
        const next =
          ((d & (advance[Math.min(c, 128)] as number)) << 1) | (d & (c === SLASH ? slashLoop : otherLoop));
        d = next | ((next & eps) << 1);
        if (d === 0) return false;
      }
      return (d & acceptBit) !== 0;
    };
  }

  // More than 32 states: the same steps, word by word, each passing its top bits on to the next (a word's new
  // value depends only on its old value and the carries from the word below, so it is overwritten in place).
  // The words are reused: a test runs to its end without yielding, so no two tests of one matcher interleave.
  const d = new Int32Array(words);
  const loops = new Int32Array(2 * words); // on "/", then on any other character
  loops.set(loopOnSlash, 0);
  loops.set(loopOnOther, words);
  return (path, from, to) => {
    d.fill(0);
    d[0] = start;
    for (let i = from; i < to; i++) {
      const c = path.charCodeAt(i);
      const row = Math.min(c, 128) * words;
      const loop = c === SLASH ? 0 : words;
      let carry = 0;
      let epsilonCarry = 0;
      let alive = 0;
      for (let w = 0; w < words; w++) {
        const dw = d[w] as number;
        const moved = dw & (advance[row + w] as number);
        const stepped = (moved << 1) | carry | (dw & (loops[loop + w] as number));
        carry = moved >>> 31;
        const skipped = stepped & (epsilon[w] as number);
        const closed = stepped | (skipped << 1) | epsilonCarry;
        epsilonCarry = skipped >>> 31;
        d[w] = closed;
        alive |= closed;
      }
      if (alive === 0) return false;
    }
    return ((d[acceptWord] as number) & acceptBit) !== 0;
  };
}
