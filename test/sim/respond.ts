/**
 * A simulated request's response, as the limiter hands it off (src/middleware/hand-off.ts): once its status is
 * known, the units of every rule that does not count that status go back (`heldUntilStatus`,
 * `giveBackUncounted`); then each settled rule's real cost is read from the body as it streams
 * (`settlingOf`, `settleFrom`, the real SSE scanner) and charged or given back. The real functions run against
 * the isolate's real decider; a wrapper only notes when each call went out and came back, and what it said it
 * did, on the admission it moves (`Admission.adjust`), for the model (test/sim/after-response.ts).
 */
import type { SettleSource } from "../../src/config";
import { type StatusCount, statusCount } from "../../src/config/count";
import type { Decider, Decision, RefundCall, Settlement, WaitUntil } from "../../src/engine/types";
import { giveBackUncounted, heldUntilStatus, type StatusCounts } from "../../src/middleware/count";
import { settleFrom, settlingOf } from "../../src/middleware/settle";
import { traitsOf } from "../../src/engine/algorithms";
import type { Admission } from "./model";
import { type Answer, ruleIndex, ruleName, type Scenario, type SimRule } from "./scenario";

export type { Answer } from "./scenario";

/** The statuses a counting rule of the simulation counts: a login's failures. */
export const COUNTED: StatusCount = statusCount(["4xx"]);

/** Where a settled rule of the simulation reads its real cost: an OpenAI-style usage event. */
export const SOURCE: SettleSource = {
  kind: "sse",
  path: ["usage", "total_tokens"],
  text: "sse:usage.total_tokens",
};

/** A body that streams `units` as its real cost in its last event, among others that carry none. */
function bodyOf(units: number): string {
  const chunk = (usage: unknown) =>
    `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ delta: { content: "é" } }], usage })}\n\n`;
  return `${chunk(null)}${chunk(null)}${chunk({ total_tokens: units })}data: [DONE]\n\n`;
}

/** A scenario's rules whose units may move after the response, as the limiter holds them. */
export interface ResponseRules {
  /** Rules counting by status, and what each counts. */
  counts: StatusCounts;
  /** Settled rules, and where each reads its real cost. */
  sources: ReadonlyMap<string, SettleSource>;
  /** Either. */
  affected: ReadonlySet<string>;
  /** Buckets among them: a request to one names itself and asks for its stamps (src/middleware/limiter.ts). */
  stamped: ReadonlySet<string>;
  /** What a response said to rule `name`'s units (the model's view: test/sim/after-response.ts). */
  responseOf(name: string, said: Answer): { counted: boolean; spent?: number };
}

export function responseRulesOf(scenario: Scenario): ResponseRules {
  const names = (pick: (r: SimRule) => boolean) =>
    scenario.rules.flatMap((r, i) => (pick(r) ? [ruleName(i)] : []));
  return {
    counts: new Map(names((r) => r.count === true).map((name) => [name, COUNTED] as const)),
    sources: new Map(names((r) => r.settle === true).map((name) => [name, SOURCE] as const)),
    affected: new Set(names((r) => r.count === true || r.settle === true)),
    stamped: new Set(
      names((r) => (r.count === true || r.settle === true) && traitsOf(r.algorithm).shape === "bucket"),
    ),
    responseOf(name, said) {
      const rule = scenario.rules[ruleIndex(name)] as SimRule;
      const counted = !rule.count || COUNTED.counts(said.status);
      return { counted, ...(rule.settle && { spent: said.spent }) };
    },
  };
}

/**
 * Handles `decision`'s response as the limiter does, noting on `records` (by rule) what each give-back and
 * settlement did. Resolves once the body has been read to its end (the settlement then runs in `waitUntil`).
 */
export async function respond(
  decider: Decider,
  decision: Decision,
  records: ReadonlyMap<string, Admission>,
  answer: Answer,
  rules: { counts: StatusCounts; sources: ReadonlyMap<string, SettleSource> },
  ids: { requestId: string; settleId: string; decidedAtMs: number },
  waitUntil: WaitUntil,
): Promise<void> {
  const { counts, sources } = rules;
  const note = (kind: "status" | "settle", rule: string, units: number, from: number, applied?: number) => {
    const record = records.get(rule);
    const at = { from, to: Date.now() + 1 };
    if (record) record.adjust = { kind, units, at, ...(applied !== undefined && { applied }) };
  };
  const noted: Decider = {
    decide: (calls, id, options) => decider.decide(calls, id, options),
    release: (call, id, reservation) => decider.release(call, id, reservation),
    refund: async (calls: RefundCall[], id: string, whenUs: number) => {
      const from = Date.now();
      try {
        const back = await (decider.refund as NonNullable<Decider["refund"]>)(calls, id, whenUs);
        calls.forEach((c, i) => {
          note("status", c.rule, -c.cost, from, -(back[i] ?? 0));
        });
        return back;
      } catch (error) {
        for (const c of calls) note("status", c.rule, -c.cost, from);
        throw error;
      }
    },
    settle: async (settlements: Settlement[], id: string, decidedAtMs: number) => {
      const from = Date.now();
      try {
        const done = await (decider.settle as NonNullable<Decider["settle"]>)(settlements, id, decidedAtMs);
        settlements.forEach((s, i) => {
          note("settle", s.result.call.rule, s.units, from, done[i]?.applied ?? 0);
        });
        return done;
      } catch (error) {
        for (const s of settlements) note("settle", s.result.call.rule, s.units, from);
        throw error;
      }
    },
  };
  const held = heldUntilStatus(decision, counts);
  giveBackUncounted(noted, held, counts, answer.status, ids.requestId, ids.decidedAtMs, waitUntil);
  const settling =
    sources.size > 0
      ? settlingOf(decision, sources, (rule) => counts.get(rule)?.counts(answer.status) ?? true)
      : undefined;
  if (!settling) return;
  const response = new Response(bodyOf(answer.spent), {
    status: answer.status,
    headers: { "content-type": "text/event-stream" },
  });
  const context = {
    decider: noted,
    requestId: ids.settleId,
    decidedAtMs: ids.decidedAtMs,
    waitUntil,
    log: () => undefined,
  };
  await settleFrom(response, settling, context, false).response.text();
}
