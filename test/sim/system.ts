/**
 * The simulated system: several isolates (each the Worker's own stack, `createEngine` with leases, as
 * src/worker.ts builds it) sharing one real Redis through the simulated network (test/sim/network.ts), driven
 * by a scenario of timed operations that run concurrently: requests of random cost over one or two rules
 * (split decisions and their refunds when two identities fall in different slot groups), bursts that make an
 * identity hot (leases, their short spends and returns), delay holds whose clients may go away (give-backs),
 * concurrency slots held and released, admin resets, and network faults (slow ways in and out, errors, lost
 * replies). Each request is judged as the limiter judges it (`verdictOf`, `delayOf`, `giveBack`); what clients
 * were let through is recorded, and the model (test/sim/model.ts) checks it.
 */
import type { Redis as IORedis } from "ioredis";
import { createAdminApp } from "../../src/admin/app";
import { adminContextOf } from "../../src/admin/context";
import { raiseFence } from "../../src/admin/fence";
import type { RuleConfig } from "../../src/config/rules";
import { traitsOf } from "../../src/engine/algorithms";
import { resetFenceMs, stateKey } from "../../src/engine/keys";
import type { Decider, Decision, RuleCall, WaitUntil } from "../../src/engine/types";
import { giveBackUncounted, heldUntilStatus } from "../../src/middleware/count";
import { delayOf, giveBack } from "../../src/middleware/delay";
import { verdictOf } from "../../src/middleware/verdict";
import type { ResilientDecider } from "../../src/resilience/decider";
import { createEngine, type Engine } from "../../src/resilience/engine";
import { type Change, epochsOf } from "./epochs";
import { checkFallbacks, type FellBack } from "./fail-open";
import { checkBlocks, checkLedger, checkResponses, type Denial } from "./after-response";
import { type Admission, checkHistory, finalOf, floorOf, type Limits, type Violation } from "./model";
import type { Fault, Network } from "./network";
import { type Answer, COUNTED, respond, SOURCE } from "./respond";

export { type Change, type Epoch, epochsOf, inEffect } from "./epochs";

/** One rule of a scenario. */
export interface SimRule extends Limits {
  /** Token-bucket/GCRA: the longest hold, ms; 0 = deny. */
  delayMs: number;
  /** The mode every isolate starts in (a `mode` operation switches it). @default "on" */
  mode?: Mode | undefined;
  /**
   * `open`: a decision Redis cannot give in time goes to the isolate's fallback limiter, whose admissions are
   * checked against the bound docs/fail-open.md states. @default "closed"
   */
  failure?: "open" | "closed" | undefined;
  /** Counts by status (`count = { status = ["4xx"] }`): a request whose status it does not count gives back. */
  count?: boolean | undefined;
  /** Settles the real cost from the response (`settle = "sse:usage.total_tokens"`). */
  settle?: boolean | undefined;
  /** The penalty box (`block`), ms. */
  blockMs?: number | undefined;
  /** Tiers: a window's or a log's own limit, a bucket's own burst (a call's `tier` picks one). */
  tiers?: { limit: number; burst: number }[] | undefined;
}

/** A rule's mode, as the live switch sets it: `off` skips the rule, `monitor` counts and never denies. */
export type Mode = "on" | "monitor" | "off";

/** One call of a request: which rule, which identity (0 or 1), what cost. */
export interface SimCall {
  rule: number;
  identity: number;
  cost: number;
  /** The client's tier under the rule (an index into its `tiers`); absent = the rule's own limits. */
  tier?: number | undefined;
}

/** An override's body (`PUT /overrides/:rule/:identity`): its period in whole seconds, as the API takes it. */
export interface SimOverride {
  limit: number;
  periodS?: number | undefined;
  burst?: number | undefined;
  ttlS?: number | undefined;
}

/** What a scenario does, each at `at` ms after its start. */
export type Op =
  | {
      kind: "request";
      at: number;
      isolate: number;
      calls: SimCall[];
      /** A delayed request's client goes away this long after its answer (before its slot: a give-back). */
      abortAfterMs?: number;
      /** A concurrency slot is held this long before it is released. */
      holdMs: number;
      /** What happens to its own call to Redis, if it makes one. */
      fault?: Fault;
      /** Its response (`holdMs` after its admission): the status, and the cost its body states. */
      answer?: Answer | undefined;
    }
  | {
      kind: "burst";
      at: number;
      isolate: number;
      call: SimCall;
      n: number;
      /** Each delayed client of the burst goes away this long after its answer (a give-back). */
      abortAfterMs?: number | undefined;
      /** The response each of its requests gets (absent: 200, costing what it reserved). */
      answer?: Answer | undefined;
      /** Right after the burst, one request of the same call at this cost, its call to Redis meeting `fault`. */
      after?: { cost: number; fault?: Fault | undefined } | undefined;
    }
  /**
   * Requests of cost 1 through a client that holds no lease (a decider without leases, as a Worker with
   * leases off) until one is denied: the window's count is then all admitted, but for units parked in leases.
   */
  | { kind: "fill"; at: number; call: SimCall }
  | { kind: "reset"; at: number; rule: number; identity: number }
  /**
   * The admin API's override of one identity (PUT, through the real admin app: fence, write, re-aim), or its
   * removal (`set` absent: DELETE); a `ttlS` ends it by itself, with no admin call.
   */
  | { kind: "override"; at: number; rule: number; identity: number; set?: SimOverride | undefined }
  /** `fault` for the next command (of its kind), or the next `times` of them: a slow or failing spell. */
  | { kind: "fault"; at: number; fault: Fault; times?: number | undefined }
  /**
   * A live mode switch of one rule (docs/operating.md): each isolate hears of it `lagMs[k]` later (the
   * fills' isolate last), as the live modes reach each isolate on its next refresh.
   */
  | { kind: "mode"; at: number; rule: number; mode: Mode; lagMs: number[] };

export interface Scenario {
  rules: SimRule[];
  isolates: number;
  /** Simulated databases (several: split decisions across them). */
  endpoints: number;
  /** Split by identity as on a Redis Cluster. */
  cluster: boolean;
  leaseMs: number;
  timeoutMs: number;
  /**
   * Operations' `at` counts from the first edge of a window of this length after the run starts (negative:
   * before it), so that edges are hit on purpose.
   */
  edgeMs: number;
  ops: Op[];
}

const ADMIN_TOKEN = "simulation-admin-token-0123456789abcdef";

/** The rule as the admin API knows it (built directly: the config's schema refuses periods under a second). */
const ruleConfig = (r: SimRule, i: number): RuleConfig => ({
  name: ruleName(i),
  match: {},
  key: [{ kind: "ip" }],
  keyText: "ip",
  algorithm: r.algorithm,
  limit: r.limit,
  periodMs: r.periodMs,
  burst: r.burst,
  delayMs: r.delayMs,
  cost: { kind: "units", units: 1 },
  tiers: {},
  missing: "ip",
  lease: true,
});

/** What one run found. */
export interface RunReport {
  violations: Violation[];
  /** Operations executed: every request (a burst's each), reset and fault. */
  operations: number;
  admitted: number;
  /** Requests decided from leases alone. */
  fromLeases: number;
  /** Requests that spent a lease too short for them and sent Redis the rest. */
  shortSpends: number;
  /** Requests held for a reserved slot (a delay), and those whose client went away first (a give-back). */
  delayed: number;
  givenBack: number;
  /** Requests a fail-open rule's fallback limiter let through, and units a monitor rule counted. */
  fellBack: number;
  monitored: number;
}

let runs = 0;
/** The latest a call's script may run after its caller gave up: the network's longest slow way in, and more. */
const LATEST_SCRIPT_MS = 1000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** An identity's hash: 22 characters of base64url, as `hashIdentity` makes them (the admin API takes `hash:` it). */
const identityOf = (identity: number) => `sim-identity-${identity}`.padEnd(22, "_");
const ruleName = (rule: number) => `r${rule}`;

/** The limits `c` is decided under: its tier's, else its rule's. */
export function limitsOf(scenario: Scenario, c: SimCall): Limits {
  const { algorithm, limit, periodMs, burst, tiers } = scenario.rules[c.rule] as SimRule;
  const tier = c.tier === undefined ? undefined : tiers?.[c.tier];
  return { algorithm, periodMs, limit: tier?.limit ?? limit, burst: tier?.burst ?? burst };
}

function ruleCall(scenario: Scenario, c: SimCall, mode: Exclude<Mode, "off"> = "on"): RuleCall {
  const rule = scenario.rules[c.rule] as SimRule;
  const { limit, burst } = limitsOf(scenario, c);
  const call: RuleCall = {
    rule: ruleName(c.rule),
    algorithm: rule.algorithm,
    limit,
    periodMs: rule.periodMs,
    burst,
    cost: rule.algorithm === "concurrency" ? 1 : c.cost,
    delayMs: rule.delayMs,
    mode,
    failure: rule.failure ?? "closed",
    identityHash: identityOf(c.identity),
    override: true, // the script reads the identity's override (as the edge does for one it knows of)
    // As the config parses it (src/config/rules.ts): a rule that counts by status, settles or blocks is
    // decided by Redis, never from a lease.
    lease: !(rule.count || rule.settle || rule.blockMs !== undefined),
  };
  if (rule.count) call.givesBackAfterResponse = true;
  if (rule.blockMs !== undefined) call.blockMs = rule.blockMs;
  return call;
}

/** Background work of every isolate (`waitUntil`), awaited until none is left. */
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

/** Runs `scenario` against Redis through `network`; `redis` (direct) reads the state left at the end. */
export async function runScenario(
  scenario: Scenario,
  network: Network,
  token: string,
  redis: IORedis,
): Promise<RunReport> {
  const prefix = `sim-${process.pid}-${runs++}-${Date.now().toString(36)}`;
  const endpoints = Array.from({ length: scenario.endpoints }, (_, i) => ({
    url: network.endpoint(`e${i}`),
    token,
  }));
  const engines: Engine[] = [];
  const isolates: Decider[] = [];
  for (let i = 0; i < scenario.isolates; i++) {
    const engine = createEngine({
      endpoints,
      prefix,
      timeoutMs: scenario.timeoutMs,
      adminTimeoutMs: 1000,
      cluster: scenario.cluster,
      decider: { log: () => undefined },
      leases: "on",
      leaseMs: scenario.leaseMs,
    });
    engines.push(engine);
    isolates.push(engine.decider);
  }
  // One more isolate, without leases: the fills' (its index is `scenario.isolates`).
  const plain = createEngine({
    endpoints,
    prefix,
    timeoutMs: scenario.timeoutMs,
    adminTimeoutMs: 1000,
    cluster: scenario.cluster,
    decider: { log: () => undefined },
    leases: "off",
  });
  engines.push(plain);
  isolates.push(plain.decider);
  const background = new Background();
  const histories = new Map<string, Admission[]>();
  /** Per (rule, identity): each admin change (reset, override set or removal, an override's ttl ending). */
  const changes = new Map<string, Change[]>();
  const record = (key: string, change: Change) => changes.set(key, [...(changes.get(key) ?? []), change]);
  const keyOf = (rule: string, identityHash: string) => `${rule} ${identityHash}`;
  let operations = 0;
  let admitted = 0;
  let fromLeases = 0;
  let shortSpends = 0;
  let delayed = 0;
  let givenBack = 0;
  let fellBack = 0;
  let monitored = 0;
  let degraded = 0;
  let requestIds = 0;
  const tails: Promise<void>[] = [];
  /** Each isolate's view of each rule's mode (a switch reaches each one on its own: `mode` operations). */
  const modes: Mode[][] = isolates.map(() => scenario.rules.map((r) => r.mode ?? "on"));
  /** Per (rule, identity): what fail-open rules let through on the fallback limiter's word, by isolate. */
  const fallbacks = new Map<string, FellBack[]>();
  // The rules whose units may move after the response (counting by status, settling), as the limiter holds them.
  const responseRules = {
    counts: new Map(scenario.rules.flatMap((r, i) => (r.count ? [[ruleName(i), COUNTED] as const] : []))),
    sources: new Map(scenario.rules.flatMap((r, i) => (r.settle ? [[ruleName(i), SOURCE] as const] : []))),
    affected: new Set(scenario.rules.flatMap((r, i) => (r.count || r.settle ? [ruleName(i)] : []))),
  };
  /** What a response said to rule `name`'s units (the model's view: test/sim/after-response.ts). */
  const responseOf = (name: string, said: Answer) => {
    const rule = scenario.rules[Number(name.slice(1))] as SimRule;
    const counted = !rule.count || COUNTED.counts(said.status);
    return { counted, ...(rule.settle && { spent: said.spent }) };
  };
  const stampedRules = new Set(
    scenario.rules.flatMap((r, i) =>
      (r.count || r.settle) && traitsOf(r.algorithm).shape === "bucket" ? [ruleName(i)] : [],
    ),
  );
  /** Per (rule, identity) of a rule with a `block`: its denials in mode `on`, and decisions that may have been. */
  const denials = new Map<string, Denial[]>();
  function noteDenials(decision: Decision, op: number, at: { from: number; to: number }) {
    for (const r of decision.results) {
      if (r.call.blockMs === undefined || r.call.mode !== "on") continue;
      const certain = r.source === "redis" && r.outcome === "denied";
      // Redis may still run a call that timed out (a slow way in), and may deny it then.
      const maybe =
        r.source === "undecided" || r.source === "fallback" || r.outcome === "cost-exceeds-capacity";
      if (!certain && !maybe) continue;
      const key = keyOf(r.call.rule, r.call.identityHash);
      const denial = { at: certain ? at : { from: at.from, to: at.to + LATEST_SCRIPT_MS }, op, certain };
      denials.set(key, [...(denials.get(key) ?? []), denial]);
    }
  }

  /** One request through isolate `k`, judged as the limiter judges it; records what it let through. */
  async function request(
    op: number,
    k: number,
    simCalls: SimCall[],
    {
      abortAfterMs,
      holdMs = 0,
      fault,
      answer,
    }: { abortAfterMs?: number; holdMs?: number; fault?: Fault; answer?: Answer | undefined } = {},
  ) {
    operations++;
    const isolate = isolates[k] as Decider;
    // A rule this isolate knows to be off is not asked at all; a request with no rule left just passes.
    const calls: RuleCall[] = [];
    for (const c of simCalls) {
      const mode = modes[k]?.[c.rule] ?? "on";
      if (mode !== "off") calls.push(ruleCall(scenario, c, mode));
    }
    if (calls.length === 0) return true;
    // Its response, when it gets one (absent: 200, costing what it reserved).
    const said = answer ?? { status: 200, spent: calls[0]?.cost ?? 1 };
    // As the limiter asks (src/middleware/limiter.ts): a bucket whose units may go back after the response
    // names its request and asks for its stamps.
    const stamped = calls.some((c) => stampedRules.has(c.rule));
    const id =
      calls.some((c) => traitsOf(c.algorithm).storesRequestId) || stamped ? `q${op}-${requestIds++}` : "-";
    const sentAt = Date.now();
    let decision: Decision | undefined = isolate.decideNow?.(calls, id, background.waitUntil);
    if (decision === undefined) {
      if (fault) network.inject(fault);
      decision = await isolate.decide(calls, id, {
        budgetMs: scenario.timeoutMs,
        waitUntil: background.waitUntil,
        ...(stamped && { stamps: true }),
      });
    }
    const repliedAt = Date.now() + 1; // Date.now() is whole ms: the true instant may lie up to 1 ms past it
    noteDenials(decision, op, { from: sentAt, to: repliedAt });
    // Redis did not answer in time (the call may still have counted: its lease grant is lost with it).
    if (decision.results.some((r) => r.source === "undecided" || r.source === "fallback")) degraded++;
    const slots = decision.results.filter(
      (r) =>
        traitsOf(r.call.algorithm).holdsSlot &&
        r.outcome === "allowed" &&
        (r.source === "redis" || r.source === "fallback"),
    );
    const release = () => background.waitUntil(Promise.all(slots.map((r) => isolate.release(r.call, id))));
    if (!verdictOf(decision).allowed) {
      if (slots.length > 0) release();
      return false;
    }
    // The client's wait for its slot, its slot held, run on while the caller goes on (a burst's clients are
    // concurrent); the run awaits them all before its checks.
    tails.push(
      (async () => {
        const waitMs = delayOf(decision);
        if (waitMs > 0) delayed++;
        if (waitMs > 0 && abortAfterMs !== undefined && abortAfterMs < waitMs) {
          givenBack++;
          await sleep(abortAfterMs);
          background.waitUntil(giveBack(isolate, decision, id));
          // Nothing reached the origin: a rule counting by status gets its units back too (the limiter's way).
          const held = heldUntilStatus(decision, responseRules.counts).filter((r) => !r.delayMs);
          giveBackUncounted(isolate, held, responseRules.counts, 499, id, sentAt, background.waitUntil);
          if (slots.length > 0) release();
          return;
        }
        if (waitMs > 0) await sleep(waitMs);
        admitted++;
        if (decision.results.every((r) => r.source === "lease")) fromLeases++;
        if (decision.results.some((r, i) => r.call.cost !== calls[i]?.cost)) shortSpends++;
        if (decision.results.some((r) => r.source === "fallback" && r.outcome === "allowed")) fellBack++;
        // A held request passes at its slot: `waitMs` after the script ran, less up to 1 ms of rounding.
        const at =
          waitMs > 0
            ? { from: sentAt + waitMs - 1, to: repliedAt + waitMs }
            : { from: sentAt, to: repliedAt };
        const records: Admission[] = [];
        const byRule = new Map<string, Admission>();
        for (const r of decision.results) {
          // What each rule counted: an `on` rule everything the request was let through with; a monitor rule
          // only what it allowed (one that would deny is not written), at its own slot if it reserved one.
          if (r.outcome !== "allowed") continue;
          const key = keyOf(r.call.rule, r.call.identityHash);
          // The result's call is what Redis took; the request's own cost is what the client got.
          const units = calls.find((c) => c.rule === r.call.rule)?.cost ?? r.call.cost;
          const ownMs = r.call.mode === "monitor" ? (r.delayMs ?? 0) : waitMs;
          const simCall = simCalls.find((c) => ruleName(c.rule) === r.call.rule);
          const record: Admission = {
            units,
            at: ownMs > 0 ? { from: sentAt + ownMs - 1, to: repliedAt + ownMs } : at,
            op,
            ...(ownMs > 0 && { decidedFrom: sentAt }),
            ...(simCall?.tier !== undefined && { limits: limitsOf(scenario, simCall) }),
            ...(r.call.mode === "monitor" && { monitor: true }),
            ...(responseRules.affected.has(r.call.rule) &&
              r.source === "redis" && { response: responseOf(r.call.rule, said) }),
          };
          byRule.set(r.call.rule, record);
          if (r.call.mode === "monitor") monitored += units;
          if (r.source === "fallback") {
            const fell = { ...record, isolate: k };
            fallbacks.set(key, [...(fallbacks.get(key) ?? []), fell]);
            records.push(fell);
          } else if (r.source === "redis" || r.source === "lease") {
            histories.set(key, [...(histories.get(key) ?? []), record]);
            records.push(record);
          }
        }
        const answered = decision.results.some((r) => responseRules.affected.has(r.call.rule));
        if (slots.length > 0 || answered) await sleep(holdMs);
        if (answered) {
          const ids = {
            requestId: id,
            settleId: id === "-" ? `s${op}-${requestIds++}` : id,
            decidedAtMs: sentAt,
          };
          await respond(isolate, decision, byRule, said, responseRules, ids, background.waitUntil).catch(
            () => undefined,
          );
        }
        if (slots.length > 0) {
          const releasedFrom = Date.now();
          for (const record of records) record.releasedFrom = releasedFrom;
          release();
        }
      })(),
    );
    return true;
  }

  async function reset(rule: number, identity: number) {
    operations++;
    const r = scenario.rules[rule] as SimRule;
    const identityHash = identityOf(identity);
    const engine = engines[0] as Engine;
    const from = Date.now();
    const ms = resetFenceMs(r.algorithm, [r]);
    await raiseFence(
      { prefix, rule: ruleName(rule), identityHash },
      ms,
      engine.storeOf(identityHash).redis,
      undefined,
      {
        stateKeys: [stateKey(prefix, ruleName(rule), identityHash)],
        bucket: traitsOf(r.algorithm).shape === "bucket",
      },
    ).catch(() => undefined);
    // Every isolate hears of it (the change log), leases revoked and cached denials dropped.
    for (const isolate of isolates) (isolate as ResilientDecider).forget(ruleName(rule), identityHash);
    record(keyOf(ruleName(rule), identityHash), { from, to: Date.now() + 1, limits: "same", kind: "reset" });
  }

  const executionContext = {
    waitUntil: background.waitUntil,
    passThroughOnException: () => undefined,
    props: {},
  } as unknown as Parameters<ReturnType<typeof createAdminApp>["fetch"]>[2];
  const admin = createAdminApp(() =>
    adminContextOf({
      config: {
        rules: scenario.rules.map(ruleConfig),
        prefix,
        adminToken: ADMIN_TOKEN,
        mode: "on",
        failure: "closed",
        timeoutMs: scenario.timeoutMs,
        clientIpHeader: "cf-connecting-ip",
      },
      stores: (engines[0] as Engine).stores,
      shardOf: (engines[0] as Engine).shardOf,
      decider: (engines[0] as Engine).decider,
      adminTimeoutMs: 1000,
    }),
  );

  async function override(rule: number, identity: number, set: SimOverride | undefined) {
    operations++;
    const r = scenario.rules[rule] as SimRule;
    const identityHash = identityOf(identity);
    const from = Date.now();
    const body = set && {
      limit: set.limit,
      ...(set.periodS !== undefined && { period: set.periodS }),
      ...(set.burst !== undefined && { burst: set.burst }),
      ...(set.ttlS !== undefined && { ttl: set.ttlS }),
    };
    const response = await Promise.resolve(
      admin.fetch(
        new Request(`http://sim.test/overrides/${ruleName(rule)}/hash:${identityHash}`, {
          method: set ? "PUT" : "DELETE",
          headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
          ...(body && { body: JSON.stringify(body) }),
        }),
        {},
        executionContext,
      ),
    ).catch(() => undefined);
    // Every isolate hears of it (the change log): leases revoked, cached denials dropped.
    for (const isolate of isolates) (isolate as ResilientDecider).forget(ruleName(rule), identityHash);
    const to = Date.now() + 1;
    const key = keyOf(ruleName(rule), identityHash);
    const limits: Limits | "own" = set
      ? {
          algorithm: r.algorithm,
          limit: set.limit,
          periodMs: set.periodS !== undefined ? set.periodS * 1000 : r.periodMs,
          burst: set.burst ?? set.limit,
        }
      : "own";
    // A change that failed (a fault on its way) may or may not have been written: its limits are unknown.
    const change: Change = { from, to, limits: response?.ok ? limits : "unknown", kind: "override" };
    record(key, change);
    if (set?.ttlS !== undefined && response?.ok) {
      const ttlMs = set.ttlS * 1000;
      record(key, { from: from + ttlMs, to: to + ttlMs, limits: "own", kind: "ttl", ends: change });
    }
  }

  const now = Date.now();
  const firstEdge = now - (now % scenario.edgeMs) + scenario.edgeMs;
  const running = scenario.ops.map(async (o, op) => {
    await sleep(Math.max(0, firstEdge + o.at - Date.now()));
    switch (o.kind) {
      case "request":
        return request(op, o.isolate, o.calls, o);
      case "burst":
        for (let i = 0; i < o.n; i++) {
          const abort = o.abortAfterMs !== undefined ? { abortAfterMs: o.abortAfterMs } : {};
          await request(op, o.isolate, [o.call], { ...abort, answer: o.answer });
        }
        if (o.after) {
          const call = { ...o.call, cost: o.after.cost };
          await request(op, o.isolate, [call], o.after.fault ? { fault: o.after.fault } : {});
        }
        return;
      case "fill":
        for (let i = 0; i <= (scenario.rules[o.call.rule] as SimRule).limit; i++) {
          if (!(await request(op, scenario.isolates, [{ ...o.call, cost: 1 }]))) break;
        }
        return;
      case "reset":
        return reset(o.rule, o.identity);
      case "override":
        return override(o.rule, o.identity, o.set);
      case "fault":
        operations++;
        for (let i = 0; i < (o.times ?? 1); i++) network.inject(o.fault);
        return;
      case "mode":
        operations++;
        await Promise.all(
          modes.map(async (view, k) => {
            await sleep(o.lagMs[k] ?? 0);
            view[o.rule] = o.mode;
          }),
        );
        return;
    }
  });
  await Promise.all(running);
  await Promise.all(tails);
  network.clear();
  await background.settle();

  // Every lease expires; each isolate's next request sweeps it and returns what it did not spend.
  await sleep(scenario.leaseMs + 150);
  const sweeper = ruleCall(scenario, { rule: 0, identity: 99, cost: 1 });
  for (const isolate of isolates) isolate.decideNow?.([sweeper], "-", background.waitUntil); // sweeps first
  await background.settle();

  const violations: Violation[] = [];
  for (const [key, history] of histories) {
    const [rule] = key.split(" ");
    const limits = scenario.rules[Number(rule?.slice(1))] as SimRule;
    // An admin change starts an epoch checked alone, under the limits in force in it (a reset keeps them, an
    // override sets its own, its removal or its ttl's end the rule's); an admission that may lie on either
    // side of a change is left out, and so is an epoch whose limits are unknown (a change a fault cut short).
    for (const epoch of epochsOf(limits, changes.get(key) ?? [], history)) {
      if (epoch.limits === "unknown") continue;
      // A tier's limits hold under the rule's own; an override replaces them (the script reads it).
      const own = epoch.limits === limits;
      const decided = epoch.history.map(
        ({ limits: tier, ...a }): Admission => (own && tier ? { ...a, limits: tier } : a),
      );
      // What each admission certainly holds whatever its response did; and the ledger, with the charges.
      const held = decided.map((a) => ({ ...a, units: floorOf(a) })).filter((a) => a.units > 0);
      const found = [...checkHistory(epoch.limits, held), ...checkLedger(epoch.limits, decided)];
      for (const v of [...found, ...checkResponses(epoch.history)]) {
        violations.push({ ...v, detail: `${key}: ${v.detail}` });
      }
    }
  }
  for (const [key, denied] of denials) {
    const rule = scenario.rules[Number(key.split(" ")[0]?.slice(1))] as SimRule;
    const enforced = (histories.get(key) ?? []).filter((a) => !a.monitor);
    const lifted = (changes.get(key) ?? []).map((c) => ({ from: c.from, to: c.to }));
    for (const v of checkBlocks(rule.blockMs as number, denied, enforced, lifted)) {
      violations.push({ ...v, detail: `${key}: ${v.detail}` });
    }
  }
  violations.push(...checkFallbacks(scenario, histories, fallbacks, changes));
  violations.push(...(await checkState(scenario, redis, prefix, histories, changes, degraded > 0)));
  return {
    violations,
    operations,
    admitted,
    fromLeases,
    shortSpends,
    delayed,
    givenBack,
    fellBack,
    monitored,
  };
}

/**
 * The units a sliding-log key holds (docs/script.md, "Sliding-log state"), from its `ZRANGE … WITHSCORES`:
 * one member per request or lease, `<request id>:<score>#<units>` (a member of the layout before,
 * `<id>:<score>:<unit>`, holds one), and `total` scored -(the units of all the others), which every script
 * keeps exact. Members are not units: a request of cost 3 is one member, and `total` is one more.
 */
export function logUnits(entries: readonly string[]): { units: number; members: number; total?: number } {
  let units = 0;
  let members = 0;
  let total: number | undefined;
  for (let j = 0; j < entries.length; j += 2) {
    const member = entries[j] as string;
    if (member === "total") {
      total = -Number(entries[j + 1]);
      continue;
    }
    members++;
    units += Number(/#(\d+)$/.exec(member)?.[1] ?? 1);
  }
  return { units, members, ...(total !== undefined && { total }) };
}

/**
 * What Redis holds at the end, every lease returned and every refund landed: never a negative count, and for a
 * window that no edge crossed (a long period) exactly the units its clients were let through with, when no
 * fault or reset could have lost units on the way (a grant whose reply was lost, a lease revoked).
 */
async function checkState(
  scenario: Scenario,
  redis: IORedis,
  prefix: string,
  histories: Map<string, Admission[]>,
  changes: Map<string, unknown[]>,
  degraded: boolean,
): Promise<Violation[]> {
  const out: Violation[] = [];
  const faulty =
    degraded ||
    scenario.ops.some(
      (o) =>
        o.kind === "fault" || (o.kind === "request" && o.fault) || (o.kind === "burst" && o.after?.fault),
    );
  for (const [key, history] of histories) {
    const [rule = "", identityHash = ""] = key.split(" ");
    const limits = scenario.rules[Number(rule.slice(1))] as SimRule;
    const state = stateKey(prefix, rule, identityHash);
    // Units admitted, as their responses left them (what each said it cost, or none for a status not counted).
    const units = history.reduce((n, a) => n + finalOf(a), 0);
    const exact = !faulty && !changes.has(key) && limits.periodMs >= 60_000;
    if (limits.algorithm === "fixed-window") {
      const counted = Number((await redis.get(state)) ?? 0);
      if (counted < 0) {
        out.push({ invariant: "never a negative count", detail: `${key}: counter ${counted}`, ops: [] });
      }
      if (exact && counted !== units) {
        out.push({
          invariant: "counter = units admitted, every lease returned and refund landed",
          detail: `${key}: counter ${counted}, admitted ${units}`,
          ops: history.map((a) => a.op),
        });
      }
    } else if (limits.algorithm === "sliding-log") {
      const log = logUnits(await redis.zrange(state, 0, -1, "WITHSCORES"));
      if (log.total !== undefined && log.total !== log.units) {
        out.push({
          invariant: "a log's total = the units of its members",
          detail: `${key}: total ${log.total}, members hold ${log.units} units (${log.members} members)`,
          ops: [],
        });
      }
      if (exact && log.units !== units) {
        out.push({
          invariant: "log units = units admitted, every lease returned and refund landed",
          detail: `${key}: the log holds ${log.units} units (${log.members} members), admitted ${units}`,
          ops: history.map((a) => a.op),
        });
      }
    } else if (limits.algorithm === "sliding-window") {
      const raw = await redis.get(state);
      if (raw?.split(":").some((n) => Number(n) < 0)) {
        out.push({ invariant: "never a negative count", detail: `${key}: state ${raw}`, ops: [] });
      }
    }
  }
  return out;
}
