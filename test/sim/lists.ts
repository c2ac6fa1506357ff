/**
 * Action rules and live lists in the simulation (docs/lists.md): `deny` and `allow` rules matching a live list
 * of client addresses, walked by the real `walkRules` before any Redis call, each isolate holding its own copy
 * of the lists (the real `LiveLists`, brought up to date from the versions its real live-mode cache reads, as
 * src/worker.ts wires them), and the lists edited through the real admin app (`PATCH /lists/:name`, one
 * script call: lua/list-write.lua). What a correct system does, as the page states it:
 *
 * - rules are walked in the order written: a counting rule before an `allow` still counts the request; the
 *   first `allow` whose list holds the client ends the walk; a `deny` in mode `on` whose list holds it refuses
 *   it before anything is counted; a `deny` in `monitor` lets it on;
 * - a list holds a client when one of its entries (an address, or a CIDR containing it) is in the list as the
 *   isolate's copy has it: every write up to the copy's version, and possibly the next one (its version is
 *   raised after its script, src/admin/lists.ts). So an entry added is matched, and an entry removed is no
 *   longer, once the copy has the write's version;
 * - every isolate's copy reaches the last write's version once it reads the live modes again (about a second).
 *
 * List writes here run one at a time (an operator's edits), so versions follow the order of the writes.
 */
import { createAdminApp } from "../../src/admin/app";
import { adminContextOf } from "../../src/admin/context";
import type { ActionRule, RuleConfig } from "../../src/config";
import type { WaitUntil } from "../../src/engine/types";
import { RequestFacts } from "../../src/identity";
import { createLiveModes, type LiveModeCache, LiveLists } from "../../src/live";
import { stepsOf, walkRules } from "../../src/middleware/actions";
import { DeniedByRuleError } from "../../src/middleware/errors";
import type { RedisPort } from "../../src/engine/redis";
import type { Isolates } from "./isolates";
import type { Violation } from "./model";
import { ruleName, type Scenario, type SimCall, type SimEntry } from "./scenario";

const ENTRY: Record<SimEntry, string> = { ip0: "198.51.100.1", ip1: "198.51.100.2", net: "198.51.100.0/30" };
/** The client address of identity `n`. */
const addressOf = (identity: number): string => `198.51.100.${identity + 1}`;
/** The entries holding identity `n`. */
const holding = (identity: number): SimEntry[] => [identity === 0 ? "ip0" : "ip1", "net"];
export const listName = (list: number): string => `l${list}`;
const actionName = (i: number): string => `a${i}`;

/** The action rules as the config parses them. */
export const actionRules = (scenario: Scenario): ActionRule[] =>
  (scenario.actions ?? []).map((a, i) => ({
    name: actionName(i),
    action: a.action,
    match: { list: listName(a.list) },
    key: [{ kind: "ip" }],
    keyText: "ip",
    before: a.before,
    ...(a.mode !== undefined && { mode: a.mode }),
  }));

/** What the walk did for one request, with what its isolate's copies held then. */
interface Walked {
  op: number;
  isolate: number;
  identity: number;
  /** Each list's version in the isolate's copy when the walk ran. */
  versions: number[];
  denied: boolean;
  /** The counting rules the request went on to. */
  rules: number[];
}

/** One list write as it was answered: its version, and the entries it removed then added. */
interface Write {
  list: number;
  version: number | "unknown";
  add: SimEntry[];
  remove: SimEntry[];
}

const ADMIN_TOKEN = "simulation-admin-token-0123456789abcdef";

/** The live lists of one run: each isolate's copy, the walk, the writes, and the model's checks. */
export class SimLists {
  private readonly caches: LiveModeCache[];
  private readonly copies: LiveLists[];
  private readonly steps: ReturnType<typeof stepsOf>;
  private readonly walked: Walked[] = [];
  private readonly writes: Write[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private readonly names: string[];

  constructor(
    private readonly scenario: Scenario,
    private readonly isolates: Isolates,
    private readonly rules: RuleConfig[],
    private readonly prefix: string,
  ) {
    const lists = new Set((scenario.actions ?? []).map((a) => a.list));
    this.names = [...lists].sort().map(listName);
    this.steps = stepsOf(
      rules.map((rule) => ({ rule })),
      actionRules(scenario),
    );
    this.caches = isolates.engines.map((engine) =>
      createLiveModes(engine.stores[0]?.redis as RedisPort, prefix, {
        ruleNames: rules.map((r) => r.name),
        listNames: this.names,
        refreshIntervalMs: scenario.liveRefreshMs ?? 1000,
      }),
    );
    this.copies = isolates.engines.map(
      (engine) => new LiveLists(engine.stores[0]?.redis as RedisPort, prefix, this.names),
    );
  }

  /**
   * The walk of one request through isolate `k` (its client: the first call's identity): the calls it goes on
   * to, or `denied`.
   */
  async walk(op: number, k: number, calls: SimCall[]): Promise<SimCall[] | "denied"> {
    const waitUntil = this.isolates.background.waitUntil;
    const identity = calls[0]?.identity ?? 0;
    const live = await (this.caches[k] as LiveModeCache).current(waitUntil);
    const copy = this.copies[k] as LiveLists;
    copy.sync(live, waitUntil);
    const request = new Request("http://sim.test/", { headers: { "cf-connecting-ip": addressOf(identity) } });
    const facts = new RequestFacts(request, { clientIpHeader: "cf-connecting-ip" });
    const versions = (this.scenario.actions ?? []).map((a) => copy.versionOf(listName(a.list)));
    // Address entries only: the walk answers at once (no key to hash), so no copy moves under it.
    const result = await walkRules(this.steps, "GET", facts, { live, mode: "on", lists: copy });
    const denied = result instanceof DeniedByRuleError;
    const names = new Set(denied ? [] : result.map((p) => p.rule.name));
    const rules = this.rules.flatMap((r, i) => (names.has(r.name) ? [i] : []));
    this.walked.push({ op, isolate: k, identity, versions, denied, rules });
    return denied ? "denied" : calls.filter((c) => names.has(ruleName(c.rule)));
  }

  /** `PATCH /lists/:name` through isolate `k`'s admin app, after every write before it has been answered. */
  write(k: number, list: number, add: SimEntry[], remove: SimEntry[]): Promise<unknown> {
    const next = this.queue.then(() => this.patch(k, list, add, remove));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async patch(k: number, list: number, add: SimEntry[], remove: SimEntry[]) {
    const engine = this.isolates.engines[k] ?? this.isolates.engines[0];
    if (!engine) return;
    const waitUntil = this.isolates.background.waitUntil;
    const admin = createAdminApp(() =>
      adminContextOf({
        config: {
          rules: this.rules,
          actions: actionRules(this.scenario),
          prefix: this.prefix,
          adminToken: ADMIN_TOKEN,
          mode: "on",
          failure: "closed",
          timeoutMs: this.scenario.timeoutMs,
          clientIpHeader: "cf-connecting-ip",
        },
        stores: engine.stores,
        shardOf: engine.shardOf,
        decider: engine.decider,
        lists: this.copies[k] as LiveLists,
        adminTimeoutMs: 1000,
      }),
    );
    const body = JSON.stringify({ add: add.map((e) => ENTRY[e]), remove: remove.map((e) => ENTRY[e]) });
    const context = {
      waitUntil,
      passThroughOnException: () => undefined,
      props: {},
    } as unknown as Parameters<typeof admin.fetch>[2];
    const response = await Promise.resolve(
      admin.fetch(
        new Request(`http://sim.test/lists/${listName(list)}`, {
          method: "PATCH",
          headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
          body,
        }),
        {},
        context,
      ),
    ).catch(() => undefined);
    const answer = response?.ok ? ((await response.json()) as { version?: number }) : undefined;
    this.writes.push({ list, version: answer?.version ?? "unknown", add, remove });
  }

  /**
   * After the run: every isolate reads the live modes again (past its refresh interval) and brings its
   * copies up to date; then each copy must have the last write's version.
   */
  async converge(settle: () => Promise<void>): Promise<void> {
    await this.queue;
    const waitUntil: WaitUntil = this.isolates.background.waitUntil;
    await new Promise((resolve) => setTimeout(resolve, (this.scenario.liveRefreshMs ?? 1000) + 50));
    await Promise.all(
      this.caches.map(async (cache, k) => {
        const live = await cache.fresh(0).catch(() => undefined);
        if (live) (this.copies[k] as LiveLists).sync(live, waitUntil);
      }),
    );
    await settle();
  }

  /** Every violation of what docs/lists.md promises, in the walks and the copies at the end. */
  check(faulty: boolean): Violation[] {
    const out: Violation[] = [];
    const actions = this.scenario.actions ?? [];
    // A list a write may have half-reached (no answer) is not checked: its versions no longer say its content.
    const known = (list: number) => this.writes.every((w) => w.list !== list || w.version !== "unknown");
    for (const w of this.walked) {
      const expected = this.expect(w, known);
      if (expected === undefined) continue;
      const got = w.denied ? "denied" : w.rules.join(",");
      const want = expected
        .map((e) => (e === "denied" ? "denied" : e.join(",")))
        .filter((e, i, all) => all.indexOf(e) === i);
      if (!want.includes(got)) {
        out.push({
          invariant:
            "lists: a request is refused, exempted or counted as its isolate's copy of the lists says",
          detail: `identity ${w.identity} through isolate ${w.isolate} (copies at versions ${w.versions.join(", ")}): ${
            w.denied ? "refused" : `counted by rules [${got}]`
          }, the model says ${want.map((e) => (e === "denied" ? "refused" : `counted by rules [${e}]`)).join(" or ")}`,
          ops: [w.op],
        });
      }
    }
    if (faulty) return out;
    for (const [list, name] of [...new Set(actions.map((a) => a.list))].map(
      (l) => [l, listName(l)] as const,
    )) {
      if (!known(list)) continue;
      const last = Math.max(0, ...this.writes.filter((w) => w.list === list).map((w) => w.version as number));
      this.copies.forEach((copy, k) => {
        if (copy.versionOf(name) !== last) {
          out.push({
            invariant:
              "lists: every isolate's copy reaches the last write once it reads the live modes again",
            detail: `list ${name}: isolate ${k} holds version ${copy.versionOf(name)}, the last write made ${last}`,
            ops: [],
          });
        }
      });
    }
    return out;
  }

  /**
   * What the walk may have done, by the model: for each list, whether it held the client at the copy's
   * version, or at the next write's (whose version may not have been raised yet); `undefined` when a list is
   * not known.
   */
  private expect(w: Walked, known: (list: number) => boolean): ("denied" | number[])[] | undefined {
    const actions = this.scenario.actions ?? [];
    const options: boolean[][] = [];
    for (const [i, a] of actions.entries()) {
      if (!known(a.list)) return undefined;
      const v = w.versions[i] as number;
      const held = (version: number) => this.holds(a.list, version, w.identity);
      const next = this.writes.some((x) => x.list === a.list && x.version === v + 1);
      options.push([...new Set([held(v), ...(next ? [held(v + 1)] : [])])]);
    }
    // Every combination of what each list may have held (at most two lists, two answers each).
    const combos = options.reduce<boolean[][]>((acc, o) => acc.flatMap((c) => o.map((x) => [...c, x])), [[]]);
    return combos.map((heldBy) => this.walkModel(heldBy));
  }

  /** Whether list `list` holds identity `identity` after its writes up to `version`, applied in order. */
  private holds(list: number, version: number, identity: number): boolean {
    const entries = new Set<SimEntry>();
    const writes = this.writes
      .filter((w) => w.list === list && (w.version as number) <= version)
      .sort((a, b) => (a.version as number) - (b.version as number));
    for (const w of writes) {
      for (const e of w.remove) entries.delete(e);
      for (const e of w.add) entries.add(e);
    }
    return holding(identity).some((e) => entries.has(e));
  }

  /** The walk docs/lists.md describes, given whether each action rule's list holds the client. */
  private walkModel(heldBy: boolean[]): "denied" | number[] {
    const actions = this.scenario.actions ?? [];
    const counted: number[] = [];
    for (let i = 0; i <= this.rules.length; i++) {
      for (const [j, a] of actions.entries()) {
        if (a.before !== i || !heldBy[j]) continue;
        if (a.action === "allow") return counted;
        if ((a.mode ?? "on") === "on") return "denied";
      }
      if (i < this.rules.length) counted.push(i);
    }
    return counted;
  }
}
