/**
 * Random scenarios for the simulator (test/sim/system.ts), as fast-check arbitraries: small limits and short
 * periods so that window edges, refills, lease expiries and returns all fall inside a run of about a second,
 * and a long period beside them where a window's count must end up exactly what was admitted.
 */
import fc from "fast-check";
import { traitsOf } from "../../src/engine/algorithms";
import type { Fault } from "./network";
import type { Op, Scenario, SimAction, SimCall, SimEntry, SimRule } from "./scenario";

/** How big a scenario gets: the fast profile's, or the long run's. */
export interface Size {
  /** Most operations in one run. */
  maxOps: number;
  /** The latest an operation starts, ms after the run's start. */
  spanMs: number;
}

export const FAST: Size = { maxOps: 24, spanMs: 1200 };
export const LONG: Size = { maxOps: 60, spanMs: 2500 };

const rule: fc.Arbitrary<SimRule> = fc
  .record({
    algorithm: fc.constantFrom(
      "fixed-window",
      "fixed-window",
      "sliding-window",
      "sliding-log",
      "token-bucket",
      "gcra",
      "concurrency",
      "shed",
    ) as fc.Arbitrary<SimRule["algorithm"]>,
    limit: fc.oneof(fc.integer({ min: 2, max: 12 }), fc.integer({ min: 20, max: 80 })),
    periodMs: fc.constantFrom(250, 400, 1000, 3_600_000),
    burstShare: fc.double({ min: 0.1, max: 1, noNaN: true }),
    delayMs: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 50, max: 300 })),
    // Mostly enforcing; sometimes watching only. Mostly failing closed; sometimes open (the fallback limiter).
    mode: fc.constantFrom("on", "on", "on", "on", "monitor") as fc.Arbitrary<"on" | "monitor">,
    failure: fc.constantFrom("closed", "closed", "open") as fc.Arbitrary<"closed" | "open">,
    // What a response may do to the units (where the algorithm's traits allow it), the penalty box, tiers.
    // (Each also takes the rule off leases, as the config does: one in ten, to leave most rules leasable.)
    count: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
    settle: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
    blockMs: fc
      .tuple(fc.integer({ min: 0, max: 9 }), fc.constantFrom(300, 800))
      .map(([n, ms]) => (n === 0 ? ms : undefined)),
    tiers: fc.option(fc.array(fc.double({ min: 0.3, max: 2, noNaN: true }), { minLength: 1, maxLength: 2 }), {
      nil: undefined,
      freq: 3,
    }),
    // A shed rule's classes (shares in hundredths, the first the highest) and sub-keys.
    shed: fc.record({
      shares: fc.uniqueArray(fc.integer({ min: 30, max: 100 }), { minLength: 1, maxLength: 4 }),
      shards: fc.integer({ min: 1, max: 3 }),
    }),
  })
  .map(
    ({
      algorithm,
      limit,
      periodMs,
      burstShare,
      delayMs,
      mode,
      failure,
      count,
      settle,
      blockMs,
      tiers,
      shed,
    }) => {
      const traits = traitsOf(algorithm);
      const bucket = traits.shape === "bucket";
      const burst = bucket ? Math.max(1, Math.round(limit * burstShare)) : limit;
      const shedding = algorithm === "shed";
      return {
        algorithm,
        limit,
        // A bucket's long period would refill nothing within a run: a second instead.
        periodMs: traits.holdsSlot ? 1000 : bucket && periodMs > 1000 ? 1000 : periodMs,
        burst,
        delayMs: bucket ? delayMs : 0,
        mode,
        // A shed rule fails closed here: the fallback limiter's slots are not modelled per class.
        failure: shedding ? "closed" : failure,
        ...(shedding && {
          shed: {
            shares: [...shed.shares].sort((a, b) => b - a).map((s) => s / 100),
            shards: Math.min(shed.shards, limit),
          },
        }),
        ...(count && !traits.holdsSlot && { count: true }),
        ...(settle && traits.settles && { settle: true }),
        ...(blockMs !== undefined && traits.takesBlock && { blockMs }),
        // A tier changes a window's or a log's limit, a bucket's burst (the same rate: its TAT means the same).
        ...(tiers &&
          !shedding && {
            tiers: tiers.map((f) =>
              bucket
                ? { limit, burst: Math.max(1, Math.round(burst * f)) }
                : { limit: Math.max(1, Math.round(limit * f)), burst },
            ),
          }),
      };
    },
  );

const fault: fc.Arbitrary<Fault> = fc.oneof(
  fc.record({ kind: fc.constant("slow-in" as const), ms: fc.integer({ min: 5, max: 150 }) }),
  fc.record({ kind: fc.constant("slow-out" as const), ms: fc.integer({ min: 5, max: 300 }) }),
  fc.record({ kind: fc.constant("error" as const) }),
  fc.record({ kind: fc.constant("lost" as const) }),
);

/** A fault on its own: for the next command of some kind (a refund or lease return, a give-back…). */
const targetedFault: fc.Arbitrary<Fault> = fc
  .tuple(
    fault,
    fc.constantFrom(undefined, "decision", "lease", "refund", "refund", "give-back", "settle", "other"),
  )
  .map(([f, on]) => (on === undefined ? f : { ...f, on: on as NonNullable<Fault["on"]> }));

/**
 * How often each kind of operation comes in one scenario: drawn per scenario, some kinds left out altogether
 * (swarm testing: a run that only bursts and spends finds what a run diluted by everything else does not).
 */
export interface Mix {
  request: number;
  burst: number;
  fill: number;
  reset: number;
  override: number;
  fault: number;
  mode: number;
  /** A lease at a window edge: a chain of a burst, a short spend on a slow way in, and a fill (`leaseEdge`). */
  edge: number;
  /** A live list's edit (a scenario with action rules only). */
  list: number;
}

const KINDS: readonly (keyof Mix)[] = [
  "request",
  "burst",
  "fill",
  "reset",
  "override",
  "fault",
  "mode",
  "edge",
  "list",
];

/**
 * Least weights every scenario's mix keeps, from `SIM_MIX` (`override:2,reset:1`): a long run aimed at one
 * mechanism (`npm run simulate -- --mix override:2,reset:1`) without changing what the others draw.
 */
export function leastMix(text = process.env.SIM_MIX ?? ""): Partial<Mix> {
  const least: Partial<Mix> = {};
  for (const part of text.split(",").filter(Boolean)) {
    const [kind = "", weight = ""] = part.split(":");
    if (!KINDS.includes(kind as keyof Mix) || !(Number(weight) >= 0)) {
      throw new Error(`SIM_MIX: "${part}" is not <kind>:<weight> (${KINDS.join(", ")})`);
    }
    least[kind as keyof Mix] = Number(weight);
  }
  return least;
}

const mix: fc.Arbitrary<Mix> = fc
  .record({
    request: fc.constantFrom(0, 1, 4),
    burst: fc.constantFrom(0, 1, 4),
    fill: fc.constantFrom(0, 1, 2),
    reset: fc.constantFrom(0, 0, 1),
    override: fc.constantFrom(0, 0, 1, 2),
    fault: fc.constantFrom(0, 1, 3),
    mode: fc.constantFrom(0, 0, 1),
    edge: fc.constantFrom(0, 0, 1),
    list: fc.constantFrom(1, 2),
  })
  .map((m) => (m.request + m.burst === 0 ? { ...m, burst: 1 } : m))
  .map((m) => {
    const least = leastMix();
    return Object.fromEntries(
      Object.entries(m).map(([kind, w]) => [kind, Math.max(w, least[kind as keyof Mix] ?? 0)]),
    ) as unknown as Mix;
  });

function ops(
  rules: SimRule[],
  actions: readonly SimAction[],
  isolates: number,
  size: Size,
  edgeMs: number,
  weights: Mix,
): fc.Arbitrary<Op[]> {
  // Anywhere in the run, or just around one of the window edges it crosses (`at` counts from the first one).
  const edges = Math.max(0, Math.floor(size.spanMs / edgeMs));
  const at = fc.oneof(
    fc.integer({ min: -edgeMs, max: size.spanMs }),
    fc
      .tuple(fc.integer({ min: 0, max: edges }), fc.integer({ min: -80, max: 40 }))
      .map(([k, d]) => k * edgeMs + d),
  );
  const isolate = fc.integer({ min: 0, max: isolates - 1 });
  const maxCapacity = Math.max(
    ...rules.map((r) => (traitsOf(r.algorithm).shape === "bucket" ? r.burst : r.limit)),
  );
  // A response: a status a counting rule counts or not, and the real cost a settled rule reads from it.
  const answer = fc.record({
    status: fc.constantFrom(200, 200, 401, 503),
    spent: fc.oneof(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 2 * maxCapacity + 2 })),
  });
  const call = (r: number): fc.Arbitrary<SimCall> => {
    const { algorithm, limit, burst, tiers, shed } = rules[r] as SimRule;
    const capacity = algorithm === "token-bucket" || algorithm === "gcra" ? burst : limit;
    return fc.record(
      {
        rule: fc.constant(r),
        identity: fc.constantFrom(0, 0, 0, 1),
        // Mostly small, sometimes the whole capacity or one more (cost-exceeds-capacity).
        cost: fc.oneof(
          fc.integer({ min: 1, max: Math.min(3, capacity) }),
          fc.integer({ min: 1, max: capacity + 1 }),
        ),
        tier: tiers
          ? fc.option(fc.nat({ max: tiers.length - 1 }), { nil: undefined })
          : fc.constant(undefined),
        // A shed rule's class: one of its own, or (past them, or none) an unlisted one.
        priority: shed
          ? fc.option(fc.nat({ max: shed.shares.length }), { nil: undefined })
          : fc.constant(undefined),
      },
      { requiredKeys: ["rule", "identity", "cost"] },
    );
  };
  const calls = fc
    .uniqueArray(fc.integer({ min: 0, max: rules.length - 1 }), { minLength: 1, maxLength: 2 })
    .chain((picked) => fc.tuple(...picked.map(call)));
  const request: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("request" as const),
    at,
    isolate,
    calls,
    abortAfterMs: fc.option(fc.integer({ min: 0, max: 250 }), { nil: undefined }),
    holdMs: fc.integer({ min: 0, max: 300 }),
    // Its own call, or the next of a kind (its split decision's refund, its lease's return…).
    fault: fc.oneof(
      { arbitrary: fc.constant(undefined), weight: 3 },
      { arbitrary: targetedFault, weight: 1 },
    ),
    answer,
  });
  const burst: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("burst" as const),
    at,
    isolate,
    call: fc
      .integer({ min: 0, max: rules.length - 1 })
      .chain(call)
      .map((c) => ({ ...c, cost: 1 })),
    n: fc.integer({ min: 2, max: 40 }),
    abortAfterMs: fc.option(fc.integer({ min: 0, max: 250 }), { nil: undefined, freq: 2 }),
    // Every client of the burst gets this response.
    answer: fc.option(answer, { nil: undefined }),
    // Then, at once, one request of a larger cost: it may find a lease too short for it.
    after: fc.option(
      fc.record({
        cost: fc.integer({ min: 2, max: 6 }),
        fault: fc.option(fault, { nil: undefined }),
      }),
      { nil: undefined },
    ),
  });
  const reset: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("reset" as const),
    at,
    rule: fc.integer({ min: 0, max: rules.length - 1 }),
    identity: fc.integer({ min: 0, max: 1 }),
  });
  const override: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("override" as const),
    at,
    rule: fc.integer({ min: 0, max: rules.length - 1 }),
    identity: fc.constantFrom(0, 0, 1),
    // Absent: the override's removal. Limits below and above the rule's; a period of its own or not.
    set: fc.option(
      fc.record(
        {
          limit: fc.oneof(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 10, max: 60 })),
          periodS: fc.constantFrom(1, 2, 3600),
          burst: fc.integer({ min: 1, max: 20 }),
          ttlS: fc.constantFrom(1, 2),
        },
        { requiredKeys: ["limit"] },
      ),
      { nil: undefined, freq: 3 },
    ),
  });
  const fill: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("fill" as const),
    at,
    call: fc.integer({ min: 0, max: rules.length - 1 }).chain(call),
  });
  // A live switch of one rule, reaching each isolate (the fills' one too) up to 300 ms apart.
  const mode: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("mode" as const),
    at,
    rule: fc.integer({ min: 0, max: rules.length - 1 }),
    mode: fc.constantFrom("on", "monitor", "off") as fc.Arbitrary<"on" | "monitor" | "off">,
    lagMs: fc.array(fc.integer({ min: 0, max: 300 }), { minLength: isolates + 1, maxLength: isolates + 1 }),
  });
  // Mostly one command's fault; sometimes a spell of them, long enough to open a breaker (the fallback answers).
  const faultOp: fc.Arbitrary<Op> = fc.record(
    {
      kind: fc.constant("fault" as const),
      at,
      fault: targetedFault,
      times: fc.constantFrom(1, 1, 1, 8, 16),
    },
    { requiredKeys: ["kind", "at", "fault"] },
  );
  // An edit of a list an action rule reads: entries removed, then added (the admin API's PATCH).
  const entries = fc.uniqueArray(fc.constantFrom("ip0", "ip1", "net") as fc.Arbitrary<SimEntry>, {
    maxLength: 2,
  });
  const list: fc.Arbitrary<Op> = fc.record({
    kind: fc.constant("list" as const),
    at,
    isolate: fc.integer({ min: 0, max: isolates }),
    list: fc.constantFrom(...(actions.length > 0 ? actions.map((a) => a.list) : [0])),
    add: entries,
    remove: entries,
  });
  const one = (op: fc.Arbitrary<Op>) => op.map((o) => [o]);
  const kinds = [
    { arbitrary: one(request), weight: weights.request },
    { arbitrary: one(burst), weight: weights.burst },
    { arbitrary: one(fill), weight: weights.fill },
    { arbitrary: one(reset), weight: weights.reset },
    { arbitrary: one(override), weight: weights.override },
    { arbitrary: one(faultOp), weight: weights.fault },
    { arbitrary: one(mode), weight: weights.mode },
    { arbitrary: leaseEdge(rules, isolates, size, edgeMs), weight: weights.edge },
    { arbitrary: one(list), weight: actions.length > 0 ? weights.list : 0 },
  ].filter((k) => k.weight > 0);
  return fc
    .array(fc.oneof(...kinds), { minLength: 1, maxLength: size.maxOps })
    .map((chains) => chains.flat().slice(0, size.maxOps + 2));
}

/**
 * A lease at a window edge, as a chain random search rarely strings together by itself (docs/exactness.md,
 * "Proof that it can fail"): an isolate's burst of 5 early in a window makes the identity hot by the lease
 * table's own count (it leases from the fifth request in a second), so it holds a unit or so; a request of up to
 * the whole capacity shortly before the edge, on a slow way in that lands past the edge (150 ms at most: within
 * the budget), may find that lease too short; a fill after the edge takes the next window to its limit.
 */
function leaseEdge(rules: SimRule[], isolates: number, size: Size, edgeMs: number): fc.Arbitrary<Op[]> {
  const edges = Math.max(1, Math.floor(size.spanMs / edgeMs));
  return fc
    .record({
      k: fc.integer({ min: 0, max: edges - 1 }),
      rule: fc.integer({ min: 0, max: rules.length - 1 }),
      isolate: fc.integer({ min: 0, max: isolates - 1 }),
      n: fc.integer({ min: 4, max: 7 }),
      before: fc.integer({ min: 20, max: 120 }),
      past: fc.integer({ min: 10, max: 30 }),
      share: fc.double({ min: 0.5, max: 1, noNaN: true }),
    })
    .map(({ k, rule, isolate, n, before, past, share }): Op[] => {
      const { algorithm, limit, burst } = rules[rule] as SimRule;
      const capacity = algorithm === "token-bucket" || algorithm === "gcra" ? burst : limit;
      const call = { rule, identity: 0, cost: 1 };
      const edge = (k + 1) * edgeMs;
      return [
        { kind: "burst", at: k * edgeMs + 5, isolate, call, n },
        {
          kind: "request",
          at: edge - before,
          isolate,
          calls: [{ ...call, cost: Math.max(2, Math.round(capacity * share)) }],
          holdMs: 0,
          fault: { kind: "slow-in", ms: before + past },
        },
        { kind: "fill", at: edge + past + 200, call },
      ];
    });
}

/** A whole scenario: rules, isolates, endpoints, lease life, and its operations. */
export function scenario(size: Size): fc.Arbitrary<Scenario> {
  return fc
    .record({
      rules: fc.array(rule, { minLength: 1, maxLength: 3 }),
      isolates: fc.integer({ min: 1, max: 3 }),
      endpoints: fc.integer({ min: 1, max: 2 }),
      cluster: fc.boolean(),
      leaseMs: fc.constantFrom(200, 500, 1000),
      mix,
      // One scenario in four has action rules reading live lists (docs/lists.md), before or among its rules.
      actions: fc.oneof(
        { arbitrary: fc.constant(undefined), weight: 3 },
        {
          arbitrary: fc.array(
            fc.record(
              {
                action: fc.constantFrom("deny", "allow") as fc.Arbitrary<"deny" | "allow">,
                list: fc.constantFrom(0, 1),
                // Mostly first: an allow there takes the request out of every rule, a deny refuses it.
                before: fc.constantFrom(0, 0, 1, 2, 3),
                mode: fc.constantFrom("on", "on", "monitor") as fc.Arbitrary<"on" | "monitor">,
              },
              { requiredKeys: ["action", "list", "before"] },
            ),
            { minLength: 1, maxLength: 2 },
          ),
          weight: 1,
        },
      ),
      liveRefreshMs: fc.constantFrom(200, 500, 1000),
    })
    .chain(({ mix: weights, actions, liveRefreshMs, ...s }) => {
      // The edges the operations gather around: the first rule's window (a second for a long one).
      const edgeMs = Math.min((s.rules[0] as SimRule).periodMs, 1000);
      const acting = actions?.map((a) => ({ ...a, before: Math.min(a.before, s.rules.length) }));
      return ops(s.rules, acting ?? [], s.isolates, size, edgeMs, weights).map(
        (o): Scenario => ({
          ...s,
          ...(acting && { actions: acting, liveRefreshMs }),
          timeoutMs: 200,
          edgeMs,
          ops: o,
        }),
      );
    });
}
