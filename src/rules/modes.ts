/**
 * A rule's effective mode (docs/operating.md): live per-rule > the rule's configured `mode` > live global >
 * the configured global mode (`RATE_LIMIT_MODE`). Live modes come from an isolate-local snapshot
 * (src/live), so resolving them costs no Redis round trip. The precedence itself is defined once, in
 * `explainMode` (src/live/effective.ts), which the admin API also uses to say where a mode came from.
 */
import type { Mode } from "../engine/types";
import { explainMode } from "../live/effective";
import type { LiveModes } from "../live/modes";

export { type LiveModes, NO_LIVE_MODES } from "../live/modes";

/** The mode a rule runs in right now. */
export function effectiveMode(
  rule: { name: string; mode?: Mode | undefined },
  live: LiveModes,
  configuredGlobal: Mode,
): Mode {
  return explainMode(rule as { name: string; mode?: Mode }, configuredGlobal, live).mode;
}
