/**
 * Lua without its comments (src/engine/lua-text.ts): what the scripts send and the package inlines. Stripping
 * must leave everything Lua reads as it was (strings and long brackets above all), and the scripts must be the
 * same text whether they are assembled from the sources as written (the Worker) or already stripped (the package).
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stripLua } from "../../src/engine/lua-text";
import { assemble, SCRIPTS } from "../../src/engine/scripts";
import { directRedis } from "./lua-support";

const LUA = resolve(import.meta.dirname, "../../lua");

/** Every source an entry may include, by the path an include names (`lib/constants`): lua/lib/ and lua/decide/. */
const PART_PATHS = ["lib", "decide"].flatMap((dir) =>
  readdirSync(join(LUA, dir))
    .filter((name) => name.endsWith(".lua"))
    .map((name) => `${dir}/${name.slice(0, -".lua".length)}`),
);
const read = (path: string) => readFileSync(join(LUA, `${path}.lua`), "utf8");

let redis: IORedis;
beforeAll(() => {
  redis = directRedis();
});
afterAll(() => redis.quit());

describe("stripping Lua's comments", () => {
  it("drops line and long comments, blank lines and trailing blanks, and keeps the code", () => {
    const lua = [
      "--[[",
      "header: KEYS, ARGV",
      "]]",
      "",
      "local a = 1 -- units",
      "  --[==[ a level-2 comment holding ]] and --[[ ]==]",
      "local b = a --[[ inline ]] + 2   ",
      "--[ not a long bracket: a line comment",
      "--[= neither",
      "-- the end",
      "return a + b",
    ].join("\n");
    expect(stripLua(lua)).toBe("local a = 1\nlocal b = a   + 2\nreturn a + b");
  });

  it("leaves every string as it is: quotes, escapes, long brackets and their blank lines", () => {
    const lines = [
      "local s = \"a -- b\" .. 'c --[[ d ]] e'",
      'local q = "say \\"--\\" here" .. \'it\\\'s -- fine\' -- a comment after them',
      'local cont = "line one\\',
      '-- still the string, after a backslash-newline"',
      "local long = [[",
      "",
      "-- not a comment: inside a long string",
      "   ",
      "]]",
      "local level = [==[ ]] -- ]=] still inside ]==] -- a comment",
      "local t = { [ [[k]] ] = 1, [ [=[k2]=] ] = 2 }",
      "local minus = 3 - -1 - - -2",
    ];
    expect(stripLua(lines.join("\n"))).toBe(
      [
        "local s = \"a -- b\" .. 'c --[[ d ]] e'",
        'local q = "say \\"--\\" here" .. \'it\\\'s -- fine\'',
        'local cont = "line one\\',
        '-- still the string, after a backslash-newline"',
        "local long = [[",
        "",
        "-- not a comment: inside a long string",
        "   ",
        "]]",
        "local level = [==[ ]] -- ]=] still inside ]==]",
        "local t = { [ [[k]] ] = 1, [ [=[k2]=] ] = 2 }",
        "local minus = 3 - -1 - - -2",
      ].join("\n"),
    );
  });

  it("keeps the shebang and the include and section lines the scripts are assembled from, indented", () => {
    const lua = [
      "#!lua flags=allow-key-locking",
      "--[[ contract ]]",
      "--#include lib/constants",
      "if x then",
      "    --#include decide/fixed-window#fast -- not a trailing comment: the whole line is kept",
      "end",
      "--#section fast",
    ].join("\n");
    expect(stripLua(lua)).toBe(
      [
        "#!lua flags=allow-key-locking",
        "--#include lib/constants",
        "if x then",
        "    --#include decide/fixed-window#fast -- not a trailing comment: the whole line is kept",
        "end",
        "--#section fast",
      ].join("\n"),
    );
  });

  it("drops each line's indentation, but not inside a string running across lines", async () => {
    const chunk = [
      "local function f(x)",
      "    if x > 1 then",
      "\t\treturn [[",
      "    kept",
      "  ]] .. 'a\\",
      "    b'",
      "    end",
      "    return x",
      "end",
      "return { f(2), f(1) }",
    ].join("\n");
    const stripped = stripLua(chunk);
    expect(stripped).toBe(
      [
        "local function f(x)",
        "if x > 1 then",
        "return [[",
        "    kept",
        "  ]] .. 'a\\",
        "    b'",
        "end",
        "return x",
        "end",
        "return { f(2), f(1) }",
      ].join("\n"),
    );
    expect(await redis.eval(stripped, 0)).toEqual(await redis.eval(chunk, 0));
  });

  it("never joins two lines: a long comment holding a line break leaves one", () => {
    // Lua 5.1 refuses `f` and `(x)` on two lines (ambiguous syntax); joined, they would become a call.
    expect(stripLua("local y = f --[[ one\n two ]] (x)")).toBe("local y = f\n(x)");
  });

  it("gives what Lua gives for the same chunk, run on real Redis", async () => {
    const chunk = [
      "--[[ a header ]]",
      "local s = \"a -- b\" .. 'c --[[ d ]] e' -- a comment",
      'local cont = "x\\',
      '-- y"',
      "local long = [==[",
      "",
      "--[[ kept ]] ]] ]=]",
      "]==] --[=[ gone",
      "]=]",
      "local n = 10 - -2 --[[ inline ]] - 1",
      "return { s, cont, long, n, #long }",
    ].join("\n");
    const stripped = stripLua(chunk);
    expect(stripped.length).toBeLessThan(chunk.length);
    const [raw, sent] = await Promise.all([redis.eval(chunk, 0), redis.eval(stripped, 0)]);
    expect(sent).toEqual(raw);
    expect(raw).toEqual(["a -- bc --[[ d ]] e", "x\n-- y", "\n--[[ kept ]] ]] ]=]\n", 11, 21]);
  });

  it("changes nothing more when run again", () => {
    for (const path of [...PART_PATHS, ...SCRIPTS.map((script) => script.name)]) {
      const once = stripLua(read(path));
      expect(stripLua(once), path).toBe(once);
    }
  });
});

describe("the scripts as sent", () => {
  const raw = Object.fromEntries(PART_PATHS.map((path) => [path, read(path)]));
  const stripped = Object.fromEntries(PART_PATHS.map((path) => [path, stripLua(read(path))]));

  it.each(SCRIPTS.map((script) => [script.name, script] as const))(
    "%s: the same text from the sources as written or already stripped, without comments or blank lines",
    (name, script) => {
      const entry = read(name);
      // The Worker's sources as written, and the package's as inlined (tsup.config.ts): one text, one SHA.
      expect(stripLua(assemble(entry, raw))).toBe(script.source);
      expect(stripLua(assemble(stripLua(entry), stripped))).toBe(script.source);
      // The package assembles its stripped sources without stripping again (FLOODGATE_LUA_STRIPPED).
      expect(assemble(stripLua(entry), stripped, false)).toBe(script.source);
      const lines = script.source.replace(/\n$/, "").split("\n");
      expect(lines.filter((line) => /^[ \t]*(--|$)|[ \t]$/.test(line))).toEqual([]);
      // Every line of the assembled script that holds no comment is still there, unindented, in its order (lua/'s long
      // comments are whole lines, and no string of theirs holds "--").
      const code = assemble(entry, raw)
        .replace(/--\[(=*)\[[\s\S]*?\]\1\]/g, "")
        .split("\n")
        .filter((line) => line.trim() !== "" && !line.includes("--"));
      const sent = script.source.split("\n");
      let at = 0;
      for (const line of code) {
        at = sent.indexOf(line.trim(), at);
        expect(at, line).toBeGreaterThanOrEqual(0);
      }
      expect(script.source.length).toBeLessThan(assemble(entry, raw).length * 0.7);
    },
  );
});
