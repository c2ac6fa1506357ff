/**
 * One simulated request, judged as the limiter judges it (`verdictOf`, `delayOf`, `giveBack`): decided from the
 * isolate's leases or through Redis (its call meeting a fault, if the scenario gives it one), held for its slot
 * or given back when its client goes away first, its concurrency slots held and released, its response handled
 * (test/sim/respond.ts). The record notes what it let through, when, and under which limits.
 */
import { traitsOf } from "../../src/engine/algorithms";
import type { Decider, Decision, RuleCall } from "../../src/engine/types";
import { giveBackUncounted, heldUntilStatus } from "../../src/middleware/count";
import { delayOf, giveBack } from "../../src/middleware/delay";
import { verdictOf } from "../../src/middleware/verdict";
import { type Isolates, ruleCall } from "./isolates";
import type { Admission, Instant } from "./model";
import type { Fault, Network } from "./network";
import { keyOf, type RunRecord } from "./record";
import { respond, responseRulesOf } from "./respond";
import { type Answer, limitsOf, ruleName, type Scenario, type SimCall, type SimRule } from "./scenario";
import { noteHolders, noteSheds, shedCall, shedLimits } from "./shed";
import type { SimLists } from "./lists";

/** The latest a call's script may run after its caller gave up: the network's longest slow way in, and more. */
const LATEST_SCRIPT_MS = 1000;
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** How one request goes beyond its calls. */
export interface RequestOptions {
  /** A delayed request's client goes away this long after its answer (before its slot: a give-back). */
  abortAfterMs?: number | undefined;
  /** A concurrency slot (and a response) comes this long after its admission. */
  holdMs?: number | undefined;
  /** What happens to its own call to Redis, if it makes one. */
  fault?: Fault | undefined;
  /** Its response (absent: 200, costing what it reserved). */
  answer?: Answer | undefined;
}

/**
 * The requests of one run: `request(op, k, calls, options)` sends one through isolate `k` and resolves once it
 * is decided (true: let through), leaving its wait, hold and response to run on in `tails`.
 */
export function requestsOf(
  scenario: Scenario,
  isolates: Isolates,
  network: Network,
  record: RunRecord,
  tails: Promise<void>[],
  lists?: SimLists,
) {
  const { background, modes } = isolates;
  const counts = record.counts;
  const responses = responseRulesOf(scenario);
  let requestIds = 0;

  /** A rule with a `block`: its denials in mode `on`, and decisions that may have been one. */
  function noteDenials(decision: Decision, op: number, at: Instant) {
    for (const r of decision.results) {
      if (r.call.blockMs === undefined || r.call.mode !== "on") continue;
      const certain = r.source === "redis" && r.outcome === "denied";
      // Redis may still run a call that timed out (a slow way in), and may deny it then.
      const maybe =
        r.source === "undecided" || r.source === "fallback" || r.outcome === "cost-exceeds-capacity";
      if (!certain && !maybe) continue;
      const denial = { at: certain ? at : { from: at.from, to: at.to + LATEST_SCRIPT_MS }, op, certain };
      record.denial(keyOf(r.call.rule, r.call.identityHash), denial);
    }
  }

  return async function request(
    op: number,
    k: number,
    simCalls: SimCall[],
    { abortAfterMs, holdMs = 0, fault, answer }: RequestOptions = {},
  ): Promise<boolean> {
    counts.operations++;
    // Action rules first, before any Redis call: a `deny` refuses, an `allow` takes out the rules after it.
    if (lists) {
      const walked = await lists.walk(op, k, simCalls);
      if (walked === "denied") {
        counts.refused++;
        return false;
      }
      if (walked.length < simCalls.length) counts.exempted++;
      simCalls = walked;
    }
    const isolate = isolates.deciders[k] as Decider;
    // A rule this isolate knows to be off is not asked at all; a request with no rule left just passes.
    const calls: RuleCall[] = [];
    for (const c of simCalls) {
      const mode = modes[k]?.[c.rule] ?? "on";
      if (mode === "off") continue;
      const shed = (scenario.rules[c.rule] as SimRule).algorithm === "shed";
      calls.push(shed ? await shedCall(scenario, c, mode) : ruleCall(scenario, c, mode));
    }
    if (calls.length === 0) return true;
    // Its response, when it gets one (absent: 200, costing what it reserved).
    const said = answer ?? { status: 200, spent: calls[0]?.cost ?? 1 };
    // As the limiter asks (src/middleware/limiter.ts): a bucket whose units may go back after the response
    // names its request and asks for its stamps.
    const stamped = calls.some((c) => responses.stamped.has(c.rule));
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
    noteSheds(scenario, record, decision, simCalls, op, { from: sentAt, to: repliedAt });
    counts.blocked += decision.results.filter((r) => r.blocked !== undefined).length;
    // Redis did not answer in time (the call may still have counted: its lease grant is lost with it).
    if (decision.results.some((r) => r.source === "undecided" || r.source === "fallback")) record.degraded++;
    const slots = decision.results.filter(
      (r) =>
        traitsOf(r.call.algorithm).holdsSlot &&
        r.outcome === "allowed" &&
        (r.source === "redis" || r.source === "fallback"),
    );
    /** Releases the slots; `released` learns when the releases came back. */
    const release = (released: (at: number) => void = () => undefined) =>
      background.waitUntil(
        Promise.all(slots.map((r) => isolate.release(r.call, id))).then(() => released(Date.now() + 1)),
      );
    if (!verdictOf(decision).allowed) {
      // A slot Redis gave a request another rule denied may have been held until its release came back.
      const holders = noteHolders(scenario, record, slots, simCalls, op, { from: sentAt, to: repliedAt });
      if (slots.length > 0) {
        release((at) => {
          for (const h of holders) h.releasedTo = at;
        });
      }
      return false;
    }
    const decided = decision;
    // The client's wait for its slot, its slot held, run on while the caller goes on (a burst's clients are
    // concurrent); the run awaits them all before its checks.
    tails.push(
      (async () => {
        const waitMs = delayOf(decided);
        if (waitMs > 0) counts.delayed++;
        if (waitMs > 0 && abortAfterMs !== undefined && abortAfterMs < waitMs) {
          counts.givenBack++;
          await sleep(abortAfterMs);
          background.waitUntil(giveBack(isolate, decided, id));
          // Nothing reached the origin: a rule counting by status gets its units back too (the limiter's way).
          const held = heldUntilStatus(decided, responses.counts).filter((r) => !r.delayMs);
          giveBackUncounted(isolate, held, responses.counts, 499, id, sentAt, background.waitUntil);
          if (slots.length > 0) release();
          return;
        }
        if (waitMs > 0) await sleep(waitMs);
        counts.admitted++;
        if (decided.results.every((r) => r.source === "lease")) counts.fromLeases++;
        if (decided.results.some((r, i) => r.call.cost !== calls[i]?.cost)) counts.shortSpends++;
        if (decided.results.some((r) => r.source === "fallback" && r.outcome === "allowed"))
          counts.fellBack++;
        // A held request passes at its slot: `waitMs` after the script ran, less up to 1 ms of rounding.
        const at =
          waitMs > 0
            ? { from: sentAt + waitMs - 1, to: repliedAt + waitMs }
            : { from: sentAt, to: repliedAt };
        const records: Admission[] = [];
        const byRule = new Map<string, Admission>();
        for (const r of decided.results) {
          // What each rule counted: an `on` rule everything the request was let through with; a monitor rule
          // only what it allowed (one that would deny is not written), at its own slot if it reserved one.
          if (r.outcome !== "allowed") continue;
          const key = keyOf(r.call.rule, r.call.identityHash);
          // The result's call is what Redis took; the request's own cost is what the client got.
          const units = calls.find((c) => c.rule === r.call.rule)?.cost ?? r.call.cost;
          const ownMs = r.call.mode === "monitor" ? (r.delayMs ?? 0) : waitMs;
          const simCall = simCalls.find((c) => ruleName(c.rule) === r.call.rule);
          // Its own limits: its tier's, or for a shed rule its class's share of its sub-key.
          const limits =
            shedLimits(scenario, r, simCalls) ??
            (simCall?.tier !== undefined ? limitsOf(scenario, simCall) : undefined);
          const admission: Admission = {
            units,
            at: ownMs > 0 ? { from: sentAt + ownMs - 1, to: repliedAt + ownMs } : at,
            op,
            ...(ownMs > 0 && { decidedFrom: sentAt }),
            ...(limits && { limits }),
            ...(r.call.mode === "monitor" && { monitor: true }),
            ...(responses.affected.has(r.call.rule) &&
              r.source === "redis" && { response: responses.responseOf(r.call.rule, said) }),
          };
          byRule.set(r.call.rule, admission);
          if (r.call.mode === "monitor") counts.monitored += units;
          if (r.source === "fallback") {
            const fell = { ...admission, isolate: k };
            record.fellBack(key, fell);
            records.push(fell);
          } else if (r.source === "redis" || r.source === "lease") {
            record.admission(key, admission);
            records.push(admission);
          }
        }
        const answered = decided.results.some((r) => responses.affected.has(r.call.rule));
        if (slots.length > 0 || answered) await sleep(holdMs);
        if (answered) {
          const judged = [...byRule.values()].flatMap((a) => (a.response ? [a.response] : []));
          if (judged.some((j) => !j.counted)) counts.uncounted++;
          if (judged.some((j) => j.spent !== undefined && j.counted)) counts.settled++;
          const ids = {
            requestId: id,
            settleId: id === "-" ? `s${op}-${requestIds++}` : id,
            decidedAtMs: sentAt,
          };
          await respond(isolate, decided, byRule, said, responses, ids, background.waitUntil).catch(
            () => undefined,
          );
        }
        if (slots.length > 0) {
          const releasedFrom = Date.now();
          for (const a of records) a.releasedFrom = releasedFrom;
          release((at) => {
            for (const a of records) a.releasedTo = at;
          });
        }
      })(),
    );
    return true;
  };
}
