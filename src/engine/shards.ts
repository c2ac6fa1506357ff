/**
 * Which of several Redis databases holds an identity's keys (docs/scaling-out.md): rendezvous
 * (highest-random-weight) hashing. Every endpoint scores the identity hash; the highest score wins. Adding an
 * endpoint moves only the identities it now wins (about 1/N of them), removing one moves only its own, and
 * the order endpoints are listed in does not matter (they are scored by name, not position).
 *
 * The score is 32-bit FNV-1a over `<endpoint name> NUL <identity hash>` with murmur3's finaliser for
 * avalanche. Not a security boundary: identity hashes are already SHA-256 output, so nobody steers them.
 */

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

function fnv1a(state: number, text: string): number {
  let h = state;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, FNV_PRIME);
  }
  return h;
}

/** murmur3's fmix32: spreads FNV's weak high bits over the whole word. */
function mix(h: number): number {
  let x = h ^ (h >>> 16);
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/**
 * A function from an identity hash to the index (into `names`) of the endpoint that holds its keys.
 * @param names one stable name per endpoint, e.g. its REST URL; must be distinct
 * @example
 * const shardOf = rendezvous(config.redisEndpoints.map((e) => e.url));
 * const endpoint = config.redisEndpoints[shardOf(identityHash)];
 */
export function rendezvous(names: readonly string[]): (identityHash: string) => number {
  if (names.length === 0) throw new Error("rendezvous: at least one endpoint is required");
  if (new Set(names).size !== names.length) throw new Error("rendezvous: endpoint names must be distinct");
  if (names.length === 1) return () => 0;
  // Each endpoint's hash state after its name and the separator, computed once.
  const seeds = names.map((name) => fnv1a(fnv1a(FNV_OFFSET, name), "\0"));
  return function shardOf(identityHash: string): number {
    let best = 0;
    let bestScore = -1;
    for (let i = 0; i < seeds.length; i++) {
      const score = mix(fnv1a(seeds[i] as number, identityHash));
      // Ties (1 in 2^32) go to the lexically smaller name, so the choice never depends on list order.
      if (score > bestScore || (score === bestScore && (names[i] as string) < (names[best] as string))) {
        best = i;
        bestScore = score;
      }
    }
    return best;
  };
}
