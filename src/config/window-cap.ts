/**
 * The cap on the requests one window may let in, for an algorithm whose state keeps one member per request
 * (`AlgorithmTraits.maxRequestsPerWindow`, src/engine/algorithms.ts; docs/script.md, "Sliding-log state"):
 * its Redis time grows with the requests in the window, never with their cost.
 */

/**
 * What is wrong with a `limit` (the rule's, a tier's or an override's) that lets in more than `cap` requests of
 * at least `leastCost` units (a fixed `cost`; 1 when the cost comes from a header), or undefined when it fits.
 */
export function windowCapProblem(limit: number, leastCost: number, cap: number): string | undefined {
  const requests = Math.ceil(limit / leastCost);
  if (requests <= cap) return undefined;
  const cost = leastCost === 1 ? "requests of 1 unit" : `requests of ${leastCost} units`;
  return (
    `${limit} lets up to ${requests} ${cost} into one window, more than ${cap} ` +
    "(the state keeps one member per request, and a decision may read them all): lower the limit, set a " +
    "larger fixed cost, or use sliding-window"
  );
}

/** The least a request of a rule costs: its fixed `cost`, or 1 when the cost comes from a header. */
export const leastCost = (cost: { kind: "units"; units: number } | { kind: "header" }): number =>
  cost.kind === "units" ? cost.units : 1;
