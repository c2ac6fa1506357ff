/**
 * The simulated regional system (docs/regions.md): one primary and two or three regional databases, each a real
 * redis-server behind its own REST server and its own simulated network (test/sim/network.ts), and isolates
 * pinned to the regions, each the Worker's own stack (`createEngine` with the real `RegionalDecider`). A scenario
 * of timed operations runs concurrently: requests of random identities and costs (an identity moves between
 * regions as its requests reach isolates of other regions), bursts that give a region a pace and so pools,
 * admin resets and overrides through the real admin app (every other isolate hearing of each on its own, later),
 * faults on any database's way, a regional database killed and restarted, the primary frozen for a spell. What
 * clients were let through is checked against the reference model (test/sim/model.ts) per (rule, identity):
 * never more than one database alone would have admitted, across all regions together.
 */
import type { RedisHandle } from "../../redis-rest/index.mjs";
import { createAdminApp } from "../../src/admin/app";
import { adminContextOf } from "../../src/admin/context";
import type { RuleConfig } from "../../src/config/rule-config";
import type { RuleCall, WaitUntil } from "../../src/engine/types";
import { verdictOf } from "../../src/middleware/verdict";
import { RegionalDecider } from "../../src/regions/decider";
import { createEngine, type Engine, type RegionalStage } from "../../src/resilience/engine";
import type { Change } from "./epochs";
import type { Admission } from "./model";
import type { Network } from "./network";
import { checkRegions, type Made } from "./regions-check";
import { dropsSettled, forgetDrops } from "./regions-drops";
import type {
  Database,
  RegionCall,
  RegionOp,
  RegionReport,
  RegionRule,
  RegionScenario,
  RegionsSetup,
  Way,
} from "./regions-types";

const ADMIN_TOKEN = "simulation-regions-admin-token-0123456789";
/** `SIM_TRACE=1`: every decision and admin change of a run, as it happens (for reading a replayed failure). */
const trace = (line: string) => {
  if (process.env.SIM_TRACE) console.log(`trace ${line}`);
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/**
 * An identity's hash in run `run`: 22 characters of base64url, as `hashIdentity` makes them (the admin API takes
 * `hash:` it); each run's own, so that the drops noted for it (test/sim/regions-drops.ts) are its own.
 */
const identityOf = (run: number, identity: number): string => `i${identity}-run${run}`.padEnd(22, "_");
const ruleName = (rule: number) => `r${rule}`;
export const regionName = (region: number): string => `g${region}`;
let runs = 0;

const ruleConfig = (r: RegionRule, i: number): RuleConfig => ({
  name: ruleName(i),
  match: {},
  key: [{ kind: "ip" }],
  keyText: "ip",
  algorithm: r.algorithm,
  limit: r.limit,
  periodMs: r.periodMs,
  burst: r.burst,
  delayMs: 0,
  cost: { kind: "units", units: 1 },
  tiers: {},
  missing: "ip",
  lease: r.lease !== false,
});

function ruleCall(s: RegionScenario, run: number, c: RegionCall): RuleCall {
  const rule = s.rules[c.rule] as RegionRule;
  return {
    rule: ruleName(c.rule),
    algorithm: rule.algorithm,
    limit: rule.limit,
    periodMs: rule.periodMs,
    burst: rule.burst,
    cost: c.cost,
    delayMs: 0,
    mode: "on",
    failure: "closed",
    identityHash: identityOf(run, c.identity),
    override: true,
    lease: rule.lease !== false,
  };
}

/** Background work of every isolate (`waitUntil`: deposits, renewals), awaited until none is left. */
class Background {
  private readonly pending = new Set<Promise<unknown>>();
  readonly waitUntil: WaitUntil = (promise) => {
    const p = promise.catch(() => undefined);
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  };
  async settle(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }
}

/** Runs `s` against the setup's databases. */
export async function runRegions(s: RegionScenario, setup: RegionsSetup): Promise<RegionReport> {
  const run = runs++;
  const prefix = `simreg-${process.pid}-${run}-${Date.now().toString(36)}`;
  const regions = setup.regions.slice(0, s.regions).map((db, i) => ({
    name: regionName(i),
    url: db.network.endpoint(regionName(i)),
    token: setup.token,
  }));
  const stage: RegionalStage = (inner, primary, context) =>
    new RegionalDecider(inner, primary, { regions, ...context, leaseMs: s.leaseMs });
  const engines: Engine[] = Array.from({ length: s.isolates }, () =>
    createEngine({
      endpoints: [{ url: setup.primary.network.endpoint("p"), token: setup.token }],
      prefix,
      timeoutMs: s.timeoutMs,
      adminTimeoutMs: 1000,
      decider: { log: () => undefined, fallbackEntries: 0 },
      // A region-decided request takes no isolate lease (docs/regions.md); the primary's own leases are the
      // existing simulator's (test/sim/system.ts).
      leases: "off",
      regional: stage,
    }),
  );
  const admins = engines.map((engine) =>
    createAdminApp(() =>
      adminContextOf({
        config: {
          rules: s.rules.map(ruleConfig),
          prefix,
          adminToken: ADMIN_TOKEN,
          mode: "on",
          failure: "closed",
          timeoutMs: s.timeoutMs,
          clientIpHeader: "cf-connecting-ip",
        },
        stores: engine.stores,
        shardOf: engine.shardOf,
        decider: engine.decider,
        adminTimeoutMs: 1000,
      }),
    ),
  );
  const background = new Background();
  const executionContext = {
    waitUntil: background.waitUntil,
    passThroughOnException: () => undefined,
    props: {},
  } as unknown as Parameters<(typeof admins)[number]["fetch"]>[2];
  const histories = new Map<string, Admission[]>();
  const made: Made[] = [];
  const keyOf = (rule: string, identityHash: string) => `${rule} ${identityHash}`;
  let operations = 0;
  let admitted = 0;
  let fromPools = 0;
  let restarts = 0;
  let freezes = 0;
  let ids = 0;

  async function request(op: number, k: number, simCalls: RegionCall[], noRegion = false) {
    operations++;
    const calls = simCalls.map((c) => ruleCall(s, run, c));
    const engine = engines[k] as Engine;
    const sentAt = Date.now();
    const decision = await engine.decider.decide(calls, `q${run}-${ids++}`, {
      ...(!noRegion && { region: regionName(k % s.regions) }),
      waitUntil: background.waitUntil,
    });
    const repliedAt = Date.now() + 1; // Date.now() is whole ms: the true instant may lie up to 1 ms past it
    trace(
      `op ${op} isolate ${k} ${noRegion ? "no region" : regionName(k % s.regions)} ` +
        `${sentAt - firstEdge}..${repliedAt - firstEdge} ms: ${verdictOf(decision).allowed ? "allowed" : "denied"} ` +
        decision.results
          .map(
            (r) =>
              `${r.call.rule}/${r.call.identityHash.slice(0, 3)} ${r.call.cost} ${r.source}${r.lease ? ` lease ${r.lease.units}/${r.lease.lifeMs}ms` : ""} left ${r.remaining}`,
          )
          .join(", "),
    );
    // Judged as the limiter judges it: a rule failing closed that Redis could not decide answers 503.
    const allowed = verdictOf(decision).allowed;
    if (!allowed) return false;
    admitted++;
    if (decision.results.every((r) => r.source === "lease")) fromPools++;
    for (const r of decision.results) {
      if (r.source !== "redis" && r.source !== "lease") continue;
      const key = keyOf(r.call.rule, r.call.identityHash);
      const record: Admission = { units: r.call.cost, at: { from: sentAt, to: repliedAt }, op };
      histories.set(key, [...(histories.get(key) ?? []), record]);
    }
    return true;
  }

  /** An admin change through isolate `o.admin`'s admin app; every other isolate forgets after its lag. */
  async function change(o: Extract<RegionOp, { kind: "reset" | "override" }>) {
    operations++;
    const rule = s.rules[o.rule] as RegionRule;
    const identityHash = identityOf(run, o.identity);
    const name = ruleName(o.rule);
    const set = o.kind === "override" ? o.set : undefined;
    const path = o.kind === "reset" ? "keys" : "overrides";
    const method = o.kind === "override" && set ? "PUT" : "DELETE";
    const body = set && {
      limit: set.limit,
      ...(set.periodS !== undefined && { period: set.periodS }),
      ...(set.burst !== undefined && { burst: set.burst }),
      ...(set.ttlS !== undefined && { ttl: set.ttlS }),
    };
    const from = Date.now();
    const admin = o.admin % s.isolates;
    const response = await Promise.resolve(
      (admins[admin] as (typeof admins)[number]).fetch(
        new Request(`http://sim.test/${path}/${name}/hash:${identityHash}`, {
          method,
          headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
          ...(body && { body: JSON.stringify(body) }),
        }),
        {},
        executionContext,
      ),
    ).catch(() => undefined);
    const answeredAt = Date.now();
    trace(
      `op ${o.kind} ${name}/i${o.identity} by isolate ${admin}: ${from - firstEdge}..${answeredAt - firstEdge} ms ${response?.status}`,
    );
    const limits: Change["limits"] =
      o.kind === "reset"
        ? "same"
        : set
          ? {
              algorithm: rule.algorithm,
              limit: set.limit,
              periodMs: set.periodS !== undefined ? set.periodS * 1000 : rule.periodMs,
              burst: set.burst ?? set.limit,
            }
          : "own";
    made.push({
      key: keyOf(name, identityHash),
      from,
      answeredAt,
      ok: response?.ok === true,
      limits,
      kind: o.kind,
      ...(set?.ttlS !== undefined && { ttlMs: set.ttlS * 1000 }),
    });
    // The other isolates read the change log on their own, each a while later.
    await Promise.all(
      engines.map(async (engine, k) => {
        if (k === admin) return;
        // (A scenario draws isolates modulo its count: isolate k's lag is the longest drawn for it.)
        await sleep(Math.max(0, ...o.lagMs.filter((_, j) => j % s.isolates === k)));
        engine.decider.forget(name, identityHash);
      }),
    );
  }

  const now = Date.now();
  const firstEdge = now - (now % s.edgeMs) + s.edgeMs;
  const wayOf = (way: Way): Network =>
    (way === "primary" ? setup.primary : (setup.regions[way % s.regions] as Database)).network;
  /** One operation of the scenario, at its time. */
  async function perform(o: RegionOp, op: number): Promise<void> {
    switch (o.kind) {
      case "request":
        if (o.fault) setup.primary.network.inject({ ...o.fault, on: "lease" });
        await request(op, o.isolate % s.isolates, o.calls, o.noRegion);
        return;
      case "burst":
        for (let i = 0; i < o.n; i++) await request(op, o.isolate % s.isolates, [o.call]);
        return;
      case "reset":
      case "override":
        return change(o);
      case "fault":
        operations++;
        for (let i = 0; i < (o.times ?? 1); i++) wayOf(o.way).inject(o.fault);
        return;
      case "restart": {
        operations++;
        const db = setup.regions[o.region % s.regions] as Database;
        trace(`region ${o.region % s.regions} killed at ${Date.now() - firstEdge} ms`);
        restarts++;
        await restartOf(db.server, o.downMs);
        trace(`region ${o.region % s.regions} back at ${Date.now() - firstEdge} ms`);
        return;
      }
      case "freeze":
        operations++;
        if (frozen) return; // one spell at a time: the first one's end thaws it
        frozen = true;
        freezes++;
        setup.primary.server.stop();
        trace(`primary frozen at ${Date.now() - firstEdge} ms`);
        await sleep(o.downMs);
        setup.primary.server.cont();
        trace(`primary thawed at ${Date.now() - firstEdge} ms`);
        frozen = false;
        return;
    }
  }

  // A run takes seconds: one still going after a minute is stuck, and says where (operations still running).
  const pending = new Set<number>();
  let at = "operations";
  const watchdog = setTimeout(() => {
    console.log(
      `simulation (regions): run ${run} still going after 60 s, at ${at}; operations not done: ` +
        JSON.stringify([...pending].map((op) => ({ op, ...s.ops[op] }))),
    );
  }, 60_000);
  let frozen = false;
  const identities = [...new Set(s.ops.flatMap(identitiesOf))].map((i) => identityOf(run, i));
  try {
    try {
      const running = s.ops.map(async (o, op) => {
        await sleep(Math.max(0, firstEdge + o.at - Date.now()));
        pending.add(op);
        await perform(o, op);
        pending.delete(op);
      });
      await Promise.all(running);
    } finally {
      if (frozen) setup.primary.server.cont();
      for (const db of [setup.primary, ...setup.regions]) db.network.clear();
    }
    at = "background work";
    await background.settle();
    at = "drops";
    await dropsSettled(identities);
  } finally {
    clearTimeout(watchdog);
  }

  const { violations, unchecked } = checkRegions(
    s.rules,
    regions.map((r) => r.name),
    made,
    histories,
  );
  forgetDrops(identities);
  return { violations, operations, admitted, fromPools, changes: made.length, unchecked, restarts, freezes };
}

/** Each server's restart in progress: two restarts of one server at once would kill each other's new process. */
const restarting = new WeakMap<RedisHandle, Promise<void>>();

/** Kills `server`, and starts a fresh, empty one on its port `downMs` later, once any restart before it is done. */
function restartOf(server: RedisHandle, downMs: number): Promise<void> {
  const mine = (restarting.get(server) ?? Promise.resolve()).then(async () => {
    await server.kill();
    await sleep(downMs);
    await server.restart();
  });
  restarting.set(
    server,
    mine.catch(() => undefined),
  );
  return mine;
}

/** The identities an operation names. */
const identitiesOf = (o: RegionOp): number[] =>
  o.kind === "request"
    ? o.calls.map((c) => c.identity)
    : o.kind === "burst"
      ? [o.call.identity]
      : o.kind === "reset" || o.kind === "override"
        ? [o.identity]
        : [];
