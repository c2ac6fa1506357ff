/**
 * The Lua scripts, one per call kind, each assembled once per isolate from the small sources in `lua/`
 * (docs/script.md has the map): an entry file per call kind, whose `--#include <path>[#<section>]` lines are
 * replaced by the text of `lua/<path>.lua` (or the part of it after its `--#section <section>` line, up to the
 * next). Each script is its own SHA; every decision is still ONE script call (the port sends `EVALSHA`, and
 * `EVAL` once on `NOSCRIPT`). A script is sent without its comments (lua-text.ts), and its SHA is that text's; the
 * published package inlines the sources already stripped (tsup.config.ts), which stripping again leaves as they are.
 */
import calendar from "../../lua/decide/calendar.lua";
import concurrency from "../../lua/decide/concurrency.lua";
import fixedWindow from "../../lua/decide/fixed-window.lua";
import leaseGrant from "../../lua/decide/lease-grant.lua";
import rules from "../../lua/decide/rules.lua";
import slidingLog from "../../lua/decide/sliding-log.lua";
import slidingWindow from "../../lua/decide/sliding-window.lua";
import tokenBucket from "../../lua/decide/token-bucket.lua";
import decide from "../../lua/decide.lua";
import decideWithOptions from "../../lua/decide-with-options.lua";
import fence from "../../lua/fence.lua";
import giveBack from "../../lua/give-back.lua";
import lease from "../../lua/lease.lua";
import listWrite from "../../lua/list-write.lua";
import constants from "../../lua/lib/constants.lua";
import counter from "../../lua/lib/counter.lua";
import override from "../../lua/lib/override.lua";
import slidingState from "../../lua/lib/sliding-state.lua";
import reaim from "../../lua/reaim.lua";
import regionDeposit from "../../lua/region-deposit.lua";
import regionSpend from "../../lua/region-spend.lua";
import refund from "../../lua/refund.lua";
import settle from "../../lua/settle.lua";
import { stripLua } from "./lua-text";
import type { RedisScript } from "./redis";

/**
 * `true` in the published package, whose sources are inlined already stripped (tsup.config.ts defines it): a
 * script is then only assembled, which gives the same text, and `stripLua` stays out of an app's bundle.
 * Undefined in the Worker and the tests, which strip what they assemble.
 */
declare const FLOODGATE_LUA_STRIPPED: boolean | undefined;
const PRESTRIPPED = typeof FLOODGATE_LUA_STRIPPED !== "undefined" && FLOODGATE_LUA_STRIPPED;

/** The sources an entry may include, by their path under `lua/` without the extension. */
const PARTS: Readonly<Record<string, string>> = {
  "lib/constants": constants,
  "lib/counter": counter,
  "lib/override": override,
  "lib/sliding-state": slidingState,
  "decide/rules": rules,
  "decide/lease-grant": leaseGrant,
  "decide/fixed-window": fixedWindow,
  "decide/calendar": calendar,
  "decide/sliding-window": slidingWindow,
  "decide/sliding-log": slidingLog,
  "decide/token-bucket": tokenBucket,
  "decide/concurrency": concurrency,
};

const INCLUDE = /^([ \t]*)--#include ([\w./-]+)(?:#([\w-]+))?[ \t]*$/gm;

/** The part of `text` after its `--#section <name>` line, up to the next section (or the end). */
function section(text: string, name: string, path: string): string {
  const mark = `\n--#section ${name}\n`;
  const lines = `\n${text}`; // a stripped source may open with its first section (its header comment gone)
  const start = lines.indexOf(mark);
  if (start < 0) throw new Error(`lua/${path}.lua has no section ${name}`);
  const body = lines.slice(start + mark.length);
  const next = body.indexOf("\n--#section ");
  return next < 0 ? body : body.slice(0, next + 1);
}

/**
 * `text` with every include replaced, recursively, each included line indented as its include line (or, with
 * `indented: false`, as it is: what stripping would leave of it anyway).
 */
export function assemble(
  text: string,
  parts: Readonly<Record<string, string>> = PARTS,
  indented = true,
): string {
  return text.replace(INCLUDE, (_line, indent: string, path: string, name: string | undefined) => {
    const part = parts[path];
    if (part === undefined) throw new Error(`lua/${path}.lua: no such source to include`);
    const included = assemble(name ? section(part, name, path) : part, parts, indented).replace(/\n+$/, "");
    if (!indented) return included;
    return included
      .split("\n")
      .map((line) => (line === "" ? line : indent + line))
      .join("\n");
  });
}

/**
 * A script as the Redis port runs it (src/engine/redis.ts): its text assembled and stripped, and its SHA-1, each
 * once per isolate and lazily (Workers forbid crypto work in global scope, and most isolates never need a given
 * script).
 */
function script(name: string, entry: string): RedisScript {
  let source: string | undefined;
  const text = () => {
    source ??= PRESTRIPPED ? assemble(entry, PARTS, false) : stripLua(assemble(entry));
    return source;
  };
  let sha: Promise<string> | undefined;
  return {
    name,
    get source() {
      return text();
    },
    sha() {
      sha ??= crypto.subtle.digest("SHA-1", new TextEncoder().encode(text())).then((digest) => {
        let hex = "";
        for (const byte of new Uint8Array(digest)) hex += byte.toString(16).padStart(2, "0");
        return hex;
      });
      return sha;
    },
  };
}

/** A plain decision (lua/decide.lua): the common call, with the one-rule fast paths. */
export const DECIDE: RedisScript = script("decide", decide);
/** A decision with peek, stamps or a test's time offset (lua/decide-with-options.lua). */
export const DECIDE_WITH_OPTIONS: RedisScript = script("decide-with-options", decideWithOptions);
/** A decision that may also lease units to the isolate (lua/lease.lua). */
export const LEASE: RedisScript = script("lease", lease);
/** Units consumed earlier given back (lua/refund.lua). */
export const REFUND: RedisScript = script("refund", refund);
/** A response's cost beyond its reservation charged (lua/settle.lua). */
export const SETTLE: RedisScript = script("settle", settle);
/** A delayed request's reserved slot given back (lua/give-back.lua). */
export const GIVE_BACK: RedisScript = script("give-back", giveBack);
/** A fixed-window counter re-aimed at the period in force (lua/reaim.lua). */
export const REAIM: RedisScript = script("reaim", reaim);
/** A reset fence raised, and an admin reset's state deleted behind it (lua/fence.lua). */
export const FENCE: RedisScript = script("fence", fence);

/** A live list replaced or edited from staged entries, all or nothing (lua/list-write.lua). */
export const LIST_WRITE: RedisScript = script("list-write", listWrite);

/** A request decided from its region's pools, all of its rules or none (lua/region-spend.lua; docs/regions.md). */
export const REGION_SPEND: RedisScript = script("region-spend", regionSpend);
/** Units the primary leased to a region put into its pool (lua/region-deposit.lua). */
export const REGION_DEPOSIT: RedisScript = script("region-deposit", regionDeposit);

/** Every script, for loading them all at once (tests, benchmarks). */
export const SCRIPTS: readonly RedisScript[] = [
  DECIDE,
  DECIDE_WITH_OPTIONS,
  LEASE,
  REFUND,
  SETTLE,
  GIVE_BACK,
  REAIM,
  FENCE,
  LIST_WRITE,
  REGION_SPEND,
  REGION_DEPOSIT,
];
