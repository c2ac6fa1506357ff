/**
 * What Redis holds at the end of a run, every lease returned and every refund landed (docs/exactness.md, "The
 * model"): never a negative count, a log's `total` equal to its members' units, and for a window that no edge
 * crossed exactly the units its clients were let through with.
 */
import type { Redis as IORedis } from "ioredis";
import { stateKey } from "../../src/engine/keys";
import { finalOf, type Violation } from "./model";
import { partsOf, type RunRecord } from "./record";
import { ruleIndex, type Scenario, type SimRule } from "./scenario";

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
export async function checkState(
  scenario: Scenario,
  redis: IORedis,
  prefix: string,
  record: RunRecord,
): Promise<Violation[]> {
  const out: Violation[] = [];
  const { histories, changes } = record;
  const faulty = record.faulty(scenario);
  for (const [key, history] of histories) {
    const { rule, identityHash } = partsOf(key);
    const limits = scenario.rules[ruleIndex(rule)] as SimRule;
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
