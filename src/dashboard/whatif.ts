/**
 * "What if I change this limit?" (docs/operating.md, "What if"): `GET /__floodgate/whatif/:rule?limit=<N>`
 * reads the highest demand each identity put on the rule in each minute of the last hour (the metrics'
 * `peak` sets, src/observability/metrics.ts: units used after an allowed request, plus the cost of a denied
 * one, in ‰ of what a full state holds), takes each identity's highest, and answers how they spread (in
 * tenths of the capacity, and above it: denied) and, for a proposed limit N, how many of them asked for more
 * than N: those that would have been denied at N.
 *
 * An estimate, and it says so: demand is measured against each identity's own capacity (an overridden one
 * against its override), a denied identity's demand is what it held plus the one request refused (its
 * retries were refused too and are not summed), and a bucket's refill is taken as it was. On demand only
 * (one pipeline of up to 60 ZRANGEs, settled minutes cached per isolate), never on a refresh.
 */
import type { Hono } from "hono";
import type { AdminEnv } from "../admin/context";
import { findRule } from "../admin/context";
import { badRequest } from "../admin/problem";
import { MAX_UNITS } from "../config/fields";
import { traitsOf } from "../engine/algorithms";
import { metricsKeys, minuteOf } from "../observability/metrics";
import { withDeadline } from "../util/deadline";
import { type Read, readSettled } from "./settled";
import { CHART_MINUTES } from "./tally";
import { pairs } from "./view";

/** How a rule's identities spread, and what a proposed limit would have done. */
export interface WhatIf {
  rule: string;
  /** What a full state holds now: a bucket's `burst`, otherwise the `limit`. */
  capacity: { of: "burst" | "limit"; units: number };
  /** Identities seen in the last hour. */
  identities: number;
  /** Identities by their highest demand: 10 tenths of the capacity (`from`/`to` in %), then above 100 %. */
  spread: Array<{ fromPercent: number; toPercent: number | null; identities: number }>;
  /** With `?limit=N`: how many identities asked for more than N units in the last hour. */
  proposed?: { limit: number; denied: number };
}

/** Registers the what-if route (behind the admin gate). */
export function whatIfRoutes(app: Hono<AdminEnv>): void {
  app.get("/whatif/:rule", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const asked = c.req.query("limit");
    const proposed = asked === undefined ? undefined : Number(asked);
    if (proposed !== undefined && (!Number.isInteger(proposed) || proposed < 1 || proposed > MAX_UNITS))
      throw badRequest(`limit: a whole number from 1 to ${MAX_UNITS}.`);
    const nowMinute = minuteOf(Date.now());
    const reads: Read[] = Array.from({ length: CHART_MINUTES }, (_, i) => {
      const minute = nowMinute - CHART_MINUTES + 1 + i;
      return {
        key: metricsKeys(admin.config.prefix, minute).peak(rule.name),
        minute,
        command: (key) => ["zrange", key, 0, -1, "withscores"],
      };
    });
    const replies = await withDeadline(admin.adminTimeoutMs, (deadline) =>
      deadline.within(() => readSettled(admin.redis, reads, nowMinute, CHART_MINUTES)),
    );
    const peaks = new Map<string, number>();
    for (const reply of replies) {
      for (const [identity, demand] of pairs(reply))
        peaks.set(identity, Math.max(peaks.get(identity) ?? 0, demand));
    }
    const bucket = traitsOf(rule.algorithm).takesBurst;
    const capacity = bucket
      ? { of: "burst" as const, units: rule.burst }
      : { of: "limit" as const, units: rule.limit };
    const spread = Array.from({ length: 11 }, (_, i) => ({
      fromPercent: i * 10,
      toPercent: i < 10 ? (i + 1) * 10 : null,
      identities: 0,
    }));
    for (const demand of peaks.values()) {
      const tenth = demand > 1000 ? 10 : Math.min(9, Math.floor(demand / 100));
      (spread[tenth] as { identities: number }).identities++;
    }
    const answer: WhatIf = { rule: rule.name, capacity, identities: peaks.size, spread };
    if (proposed !== undefined) {
      let denied = 0;
      for (const demand of peaks.values()) if ((demand / 1000) * capacity.units > proposed + 1e-9) denied++;
      answer.proposed = { limit: proposed, denied };
    }
    return c.json(answer);
  });
}
