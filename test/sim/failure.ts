/**
 * How a profile fails a run (test/sim/profile.ts, test/sim/regions-profile.ts): with its violations thrown for
 * fast-check to shrink, the first failure of the profile also printed at once with how to replay it, so that it
 * can be replayed even if the shrinking after it is cut short.
 */
import type { Violation } from "./model";

/** Throws `violations` with `scenario` (printable); `replay`, for the profile's first failure, is printed first. */
export function failRun(violations: readonly Violation[], scenario: string, replay?: string): never {
  if (replay !== undefined) {
    const first = violations[0];
    console.log(
      `simulation: violation found (${first?.invariant}: ${first?.detail}); replay: ${replay}; ` +
        `shrinking…\n${scenario}`,
    );
  }
  throw new Error(
    `${violations.length} violation(s):\n${violations
      .slice(0, 5)
      .map((v) => `  ${v.invariant}: ${v.detail} (ops ${v.ops.join(", ")})`)
      .join("\n")}\nscenario: ${scenario}`,
  );
}
