/**
 * Counting by the response (docs/counting.md): a rule with `count = { status = [...] }` is checked before the
 * request and charged only for a request whose response status is listed, as a code (`"401"`) or a class
 * (`"4xx"`). The list, checked by the rule schema, becomes one matcher here, once.
 */

/** Which response statuses a rule counts. */
export interface StatusCount {
  /** The list as written (lower-case), for messages and the admin API. */
  readonly status: readonly string[];
  /** Whether a response of `status` is charged. */
  readonly counts: (status: number) => boolean;
}

/** The matcher of a checked `count.status` list (3-digit codes and `1xx`…`5xx` classes). */
export function statusCount(status: readonly string[]): StatusCount {
  const codes = new Set<number>();
  const classes = new Set<number>();
  for (const entry of status) {
    if (entry.endsWith("xx")) classes.add(Number(entry[0]));
    else codes.add(Number(entry));
  }
  return {
    status,
    counts: (code) => codes.has(code) || classes.has(Math.floor(code / 100)),
  };
}
