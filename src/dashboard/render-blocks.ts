/**
 * A blocking rule's "Blocked now" panel in its card (a rule with a `block`, docs/protect.md "Penalty box"):
 * the identities it keeps out, hashed, each with the time its block has left and a Lift button. The page's
 * script fills it from `GET /__floodgate/blocks/:rule` when the page opens, after every action, when the
 * rule's denials move, and on Reload (client-blocks.ts); a SCAN of the keyspace is too dear for every refresh.
 */
import type { RuleView } from "./view";

/** Blocked identities listed in a card: the first page of `GET /blocks/:rule`. */
export const BLOCKS_LISTED = 50;

/**
 * The panel, empty until the script has read it. `rule.block` is a duration as formatPeriod writes it (digits
 * and a unit): nothing to escape.
 */
export function renderBlocks(rule: RuleView): string {
  if (rule.block === undefined) return "";
  return `<div class="blocks" data-blocks>
<h3>Blocked now <small>(a denial blocks for ${rule.block})</small></h3>
<p class="blocks-status" data-field="blocks.status">Reading…</p>
<ol data-list="blocked"></ol>
<button type="button" data-blocks-reload>Reload</button>
</div>`;
}
