/**
 * Which mode a rule is in, and why (docs/operating.md): live per-rule > the rule's configured `mode` >
 * live global > `RATE_LIMIT_MODE`.
 */
import type { Mode } from "../engine/types";
import type { LiveModes } from "./modes";

/** Where a rule's effective mode came from. */
export type ModeSource = "live-rule" | "rule" | "live-global" | "binding";

/** A rule's effective mode with its source, for `GET /__floodgate/rules`. */
export function explainMode(
  rule: { name: string; mode?: Mode },
  bindingMode: Mode,
  live: LiveModes,
): { mode: Mode; source: ModeSource } {
  const liveRule = live.rules[rule.name];
  if (liveRule) return { mode: liveRule, source: "live-rule" };
  if (rule.mode) return { mode: rule.mode, source: "rule" };
  if (live.global) return { mode: live.global, source: "live-global" };
  return { mode: bindingMode, source: "binding" };
}
