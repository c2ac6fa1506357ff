/**
 * The default of every optional setting, in one place: the Worker's bindings and the middleware's options
 * (the README's "Configuration" table), and the engine's factories for code that builds them directly. At the
 * bottom of the dependency order, so every layer can read it.
 */
import type { FailurePolicy, Mode } from "./types";

export const DEFAULTS = {
  mode: "on",
  failure: "open",
  /** Budget for one whole Redis decision, ms. */
  timeoutMs: 200,
  /** Budget for one admin command, refund or concurrency release (not bound by `timeoutMs`), ms. */
  adminTimeoutMs: 5000,
  /** Wait for the origin's response headers, ms. */
  originTimeoutMs: 30_000,
  prefix: "rl",
  clientIpHeader: "CF-Connecting-IP",
  leases: "on",
  /** The longest life of a lease, ms. */
  leaseMs: 1000,
  /** The endpoints are Redis Clusters (the middleware's `cluster`; the Worker's `RATE_LIMIT_REDIS_CLUSTER`). */
  cluster: false,
  /**
   * The middleware reads per-identity overrides in every decision (docs/middleware.md): not by default, as
   * the package has no admin API to write one. The Worker has no such setting: its live modes carry the
   * override index, which says which identities have one.
   */
  overrides: false,
} as const satisfies {
  mode: Mode;
  failure: FailurePolicy;
  timeoutMs: number;
  adminTimeoutMs: number;
  originTimeoutMs: number;
  prefix: string;
  clientIpHeader: string;
  leases: "on" | "off";
  leaseMs: number;
  cluster: boolean;
  overrides: boolean;
};
