/**
 * A rule's effective mode (CONTRACT §6): live per-rule > the rule's configured `mode` > live global >
 * the configured global mode (`RATE_LIMIT_MODE`). Live modes come from the admin API's isolate-local
 * snapshot, so resolving them costs no Redis round trip.
 */
import type { Mode } from "../engine/types";

/** A snapshot of the live mode switches set through `PUT /__floodgate/mode`. */
export interface LiveModes {
  global?: Mode | undefined;
  rules: Record<string, Mode>;
}

/** No live switch set. */
export const NO_LIVE_MODES: LiveModes = Object.freeze({ rules: Object.freeze({}) }) as LiveModes;

/** The mode a rule runs in right now. */
export function effectiveMode(
  rule: { name: string; mode?: Mode | undefined },
  live: LiveModes,
  configuredGlobal: Mode,
): Mode {
  return live.rules[rule.name] ?? rule.mode ?? live.global ?? configuredGlobal;
}
