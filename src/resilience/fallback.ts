/**
 * Local fallback limiter: bounds fail-open traffic while Redis cannot answer.
 *
 * APPROXIMATE, and the one place limiting logic exists outside `lua/` (it must work when Redis cannot
 * answer). Every algorithm is approximated by one fixed window of `limit` cost units per `periodMs` per
 * (rule, identity), counted in this isolate only: with N isolates serving a client, up to N × limit get
 * through; overrides (kept in Redis) are not seen; window edges allow a burst of up to 2 × limit.
 * `concurrency` and `shed` rules are not limited here (slots live in Redis). Its job is to keep a Redis outage from turning into "no limit at all",
 * not to be exact. Memory is bounded: at most `maxEntries` windows, the oldest dropped first.
 */
import type { RuleResultInput } from "../engine/results";
import { holdsSlot, type RuleCall } from "../engine/types";
import { BoundedMap } from "../util/bounded-map";

/** Most (rule, identity) windows kept. @default 10000 */
export const DEFAULT_FALLBACK_ENTRIES = 10_000;

interface Window {
  /** Window start, ms (isolate clock, aligned to the period). */
  startMs: number;
  /** Cost units admitted in this window. */
  used: number;
}

/** The fallback limiter. Plain values only, safe to keep for the isolate's lifetime. */
export class FallbackLimiter {
  private readonly windows: BoundedMap<string, Window>;

  constructor(
    maxEntries: number = DEFAULT_FALLBACK_ENTRIES,
    private readonly now: () => number = Date.now,
  ) {
    this.windows = new BoundedMap(maxEntries);
  }

  /** Windows held right now. */
  get size(): number {
    return this.windows.size;
  }

  /**
   * Judges one call locally. Does not count: call `commit` for each call of an allowed request, so a
   * denied request consumes nothing here either.
   */
  judge(call: RuleCall): Omit<RuleResultInput, "source" | "reason"> {
    const now = this.now();
    const periodMs = Math.max(1, call.periodMs);
    const startMs = now - (now % periodMs);
    const resetAfterMs = startMs + periodMs - now;
    if (holdsSlot(call.algorithm)) {
      return {
        call,
        outcome: "allowed",
        limit: call.limit,
        remaining: call.limit,
        resetAfterMs: 0,
        retryAfterMs: 0,
      };
    }
    const window = this.windows.get(keyOf(call));
    const used = window !== undefined && window.startMs === startMs ? window.used : 0;
    if (call.cost > call.limit) {
      // No wait lets it in: as Redis's, the figures say when more quota comes (src/engine/types.ts).
      return {
        call,
        outcome: "cost-exceeds-capacity",
        limit: call.limit,
        remaining: Math.max(0, call.limit - used),
        resetAfterMs,
        retryAfterMs: used > 0 ? resetAfterMs : 0,
      };
    }
    const allowed = used + call.cost <= call.limit;
    return {
      call,
      outcome: allowed ? "allowed" : "denied",
      limit: call.limit,
      remaining: Math.max(0, call.limit - used - (allowed ? call.cost : 0)),
      resetAfterMs,
      // Quota comes back at the window's end, whether or not this request fits.
      retryAfterMs: resetAfterMs,
    };
  }

  /** Counts an admitted call. */
  commit(call: RuleCall): void {
    if (holdsSlot(call.algorithm) || this.windows.capacity <= 0) return;
    const now = this.now();
    const periodMs = Math.max(1, call.periodMs);
    const startMs = now - (now % periodMs);
    const key = keyOf(call);
    const window = this.windows.get(key);
    const used = window !== undefined && window.startMs === startMs ? window.used : 0;
    this.windows.set(key, { startMs, used: used + call.cost });
  }
}

const keyOf = (call: RuleCall): string => `${call.rule}\u0000${call.identityHash}`;
