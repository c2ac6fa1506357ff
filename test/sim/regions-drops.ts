/**
 * When each region's pools of a (rule, identity) were dropped (an admin change: docs/regions.md, "Admin
 * changes"). `RegionalDecider.forget` drops them in the background and says nothing of it; the simulator needs
 * to know when the first drop after a change landed in every region, since until then a region may still spend
 * what it holds (the window the docs state), and from then on nothing leased before the change. So the real
 * `RegionPools.drop` is wrapped, once, to note when each call started and settled and whether it landed: the
 * drop itself runs unchanged, against the real database.
 */
import { RegionPools } from "../../src/regions/pool";

interface Drop {
  region: string;
  startedAt: number;
  /** When it settled, and whether both of its commands (the mark, the delete) were answered. */
  settledAt?: number;
  ok?: boolean;
  settled: Promise<unknown>;
}

/** Per `<rule> <identity hash>`: every drop of its pools, in any region. */
const drops = new Map<string, Drop[]>();
const keyOf = (rule: string, identityHash: string) => `${rule} ${identityHash}`;

const original = RegionPools.prototype.drop;
RegionPools.prototype.drop = function drop(this: RegionPools, rule: string, identityHash: string) {
  const done = original.call(this, rule, identityHash);
  const note: Drop = { region: this.name, startedAt: Date.now(), settled: done };
  note.settled = done.then(
    () => Object.assign(note, { settledAt: Date.now(), ok: true }),
    () => Object.assign(note, { settledAt: Date.now(), ok: false }),
  );
  const key = keyOf(rule, identityHash);
  drops.set(key, [...(drops.get(key) ?? []), note]);
  return done;
};

/**
 * When the first drop of (rule, identity) started at or after `from` had landed in every one of `regions`
 * (the latest of those landings), or `undefined` when some region got none that landed.
 */
export function dropsOf(
  regions: readonly string[],
  rule: string,
  identityHash: string,
  from: number,
): number | undefined {
  const all = (drops.get(keyOf(rule, identityHash)) ?? []).filter((d) => d.ok && d.startedAt >= from);
  let latest = Number.NEGATIVE_INFINITY;
  for (const region of regions) {
    const landed = all.filter((d) => d.region === region).map((d) => d.settledAt as number);
    if (landed.length === 0) return undefined;
    latest = Math.max(latest, Math.min(...landed));
  }
  return latest;
}

/** Resolves once every drop of `identityHashes` begun so far has settled. */
export async function dropsSettled(identityHashes: readonly string[]): Promise<void> {
  const mine = [...drops.entries()].filter(([key]) => identityHashes.some((h) => key.endsWith(` ${h}`)));
  await Promise.all(mine.flatMap(([, list]) => list.map((d) => d.settled)));
}

/** Forgets the drops of identities no run will look at again. */
export function forgetDrops(identityHashes: readonly string[]): void {
  for (const key of [...drops.keys()]) {
    if (identityHashes.some((h) => key.endsWith(` ${h}`))) drops.delete(key);
  }
}
