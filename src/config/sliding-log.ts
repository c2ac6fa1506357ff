/**
 * The cap on a sliding-log window. Its state holds one member per request in the window, and a decision
 * may read them all (those that left it since the last write; the ones a denial waits for): its Redis time
 * grows with the requests a window lets in, never with their cost (docs/script.md, "Sliding-log state").
 * So a sliding-log limit may let at most {@link MAX_LOG_REQUESTS} requests into one window.
 */

/** The most requests one sliding-log window may hold: `limit` over the least a request can cost. */
export const MAX_LOG_REQUESTS = 10_000;

/**
 * What is wrong with a sliding-log `limit` (the rule's, a tier's or an override's) for requests of at least
 * `leastCost` units (a fixed `cost`; 1 when the cost comes from a header), or undefined when it fits.
 */
export function logWindowProblem(limit: number, leastCost: number): string | undefined {
  const requests = Math.ceil(limit / leastCost);
  if (requests <= MAX_LOG_REQUESTS) return undefined;
  const cost = leastCost === 1 ? "requests of 1 unit" : `requests of ${leastCost} units`;
  return (
    `${limit} lets up to ${requests} ${cost} into one sliding-log window, more than ${MAX_LOG_REQUESTS} ` +
    "(a decision may read every request in it): lower the limit, set a larger fixed cost, or use sliding-window"
  );
}

/** The least a request of a rule costs: its fixed `cost`, or 1 when the cost comes from a header. */
export const leastCost = (cost: { kind: "units"; units: number } | { kind: "header" }): number =>
  cost.kind === "units" ? cost.units : 1;
