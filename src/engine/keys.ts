/**
 * Redis key layout (docs/scaling-out.md): `<prefix>:<rule>:{<hash>}`, overrides at
 * `<prefix>:override:<rule>:{<hash>}`. The identity hash is a Redis Cluster hash tag: every key of one
 * identity (all its rules, their overrides) lives in one hash slot, so one script call over them never
 * fails with CROSSSLOT on a cluster. Identities are hashed before they reach a key, so raw API keys, tokens
 * and IPs are never stored and no identity can smuggle `:`, `{` or `*` into a key of another rule or tenant.
 */

import { BoundedMap } from "../util/bounded-map";
import { type Algorithm, traitsOf } from "./algorithms";
import type { FenceLimits } from "./algorithms/logic";

export type { FenceLimits } from "./algorithms/logic";
export { capacityUs } from "./algorithms/token-bucket";

const encoder = new TextEncoder();

/**
 * Recent identities' hashes, per isolate: the same client sends many requests in a row, and an async
 * SHA-256 digest costs ~5 % of a request's CPU. Holds finished values only (never a promise: an isolate
 * must not share I/O-bound objects between requests), at most `HASH_CACHE_ENTRIES` short identities.
 */
const HASH_CACHE_ENTRIES = 4096;
const hashCache = new BoundedMap<string, string>(HASH_CACHE_ENTRIES);
const HASH_CACHE_MAX_IDENTITY_LENGTH = 256;

/** Hashed identity: SHA-256 of the UTF-8 identity, first 16 bytes, base64url (22 characters). */
export async function hashIdentity(identity: string): Promise<string> {
  const cached = hashCache.get(identity);
  if (cached !== undefined) return cached;
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(identity));
  const hash = toBase64Url(new Uint8Array(digest, 0, 16));
  if (identity.length <= HASH_CACHE_MAX_IDENTITY_LENGTH) hashCache.set(identity, hash);
  return hash;
}

/** {@link hashIdentity}'s answer without a promise when this isolate hashed `identity` recently, else `undefined`. */
export const recentHash = (identity: string): string | undefined => hashCache.get(identity);

/**
 * The hash tag of one identity: Redis Cluster hashes only what is between the first `{` and the next `}`,
 * so every key carrying it shares a slot. A hash (base64url) never contains `{` or `}`.
 */
export const identityTag = (identityHash: string): string => `{${identityHash}}`;

/** The state key of one identity under one rule. */
export const stateKey = (prefix: string, rule: string, identityHash: string): string =>
  `${prefix}:${rule}:${identityTag(identityHash)}`;

/**
 * The reset fence of one identity's state under one rule: set by an admin reset for {@link resetFenceMs}, in
 * the same transaction that deletes the state, and while it stands a refund gives nothing back into the state
 * (docs/script.md, "Returned units").
 */
export const resetFenceKey = (prefix: string, rule: string, identityHash: string): string =>
  `${stateKey(prefix, rule, identityHash)}:reset`;

/**
 * The refund ledger of one identity's token bucket under one rule: what each split decision's refund gave
 * back to it, and when, so that a refund counts what refunds of earlier decisions gave back since its own
 * (docs/script.md, "Returned units"). Only split decisions' refunds write it; it lasts
 * {@link RESET_FENCE_MAX_MS}, the furthest such a refund reaches back, after the last one.
 */
export const refundLedgerKey = (prefix: string, rule: string, identityHash: string): string =>
  `${stateKey(prefix, rule, identityHash)}:refunded`;

/**
 * The lease mark of the same bucket: when a lease of it was last granted or returned. A split decision made
 * before it gets nothing back (a lease's units, recorded at its end, must not move). It lasts
 * {@link RESET_FENCE_MAX_MS} after its last write.
 */
export const leaseMarkKey = (prefix: string, rule: string, identityHash: string): string =>
  `${stateKey(prefix, rule, identityHash)}:leased`;

/**
 * The block of one identity under one rule with a `block` (docs/protect.md, "Penalty box"): `"1"`, set by the
 * decision whose denial started it, expiring when the block ends (PX = the rule's `block`); an admin reset
 * deletes it.
 */
export const blockKey = (prefix: string, rule: string, identityHash: string): string =>
  `${stateKey(prefix, rule, identityHash)}:block`;

/**
 * The longest a reset fence stands, ms: a lease lives at most 10 s (`RATE_LIMIT_LEASE_MS`) and its return is
 * sent at most 15 s after it expired (src/leases/returns.ts), a split decision's refund within its 5 s timeout
 * (src/resilience/sharded.ts), so every return of units taken before a reset reaches Redis within this. The
 * script's `STAMP_HORIZON_MS` (lua/lib/constants.lua) must not be longer: a bucket's split refund or give-back older
 * than that gives nothing, which is what keeps one out of a fresh state behind a fence this cap shortened.
 */
export const RESET_FENCE_MAX_MS = 30_000;

/**
 * How long a reset fence must stand, ms, for state of `algorithm` whose units may have been taken under any
 * of `limits`; 0 = no fence needed: the longest its module asks for (`AlgorithmLogic.resetFenceMs`,
 * src/engine/algorithms/). After that, docs/script.md ("Why a reset's fence may be short") shows
 * that no refund of units taken before the reset can reach the fresh state.
 * Never more than {@link RESET_FENCE_MAX_MS}. So the fence never outlives its window by more than one period.
 */
export function resetFenceMs(algorithm: Algorithm, limits: readonly FenceLimits[]): number {
  const { logic } = traitsOf(algorithm);
  let longest = 0;
  for (const each of limits) longest = Math.max(longest, logic.resetFenceMs(each));
  return Math.min(longest, RESET_FENCE_MAX_MS);
}

/** The override hash of one identity under one rule (fields `limit`, `period`, `burst`). */
export const overrideKey = (prefix: string, rule: string, identityHash: string): string =>
  `${prefix}:override:${rule}:${identityTag(identityHash)}`;

/** What every override key of a rule starts with; the identity's tag follows. */
export const overrideKeyPrefix = (prefix: string, rule: string): string => `${prefix}:override:${rule}:`;

/** The identity hash of a key built by {@link stateKey} or {@link overrideKey}; `undefined` for another key. */
export function identityHashOf(key: string): string | undefined {
  return /:\{([A-Za-z0-9_-]+)\}$/.exec(key)?.[1];
}

/**
 * A hashed identity given as 32 hex digits (the 16 bytes `hashIdentity` keeps), in the base64url form keys
 * use; `undefined` if `hex` is not 32 hex digits.
 */
export function hashFromHex(hex: string): string | undefined {
  if (!/^[0-9a-f]{32}$/i.test(hex)) return undefined;
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 16; i++) bytes[i] = Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return toBase64Url(bytes);
}

function toBase64Url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
