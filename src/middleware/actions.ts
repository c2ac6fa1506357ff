/**
 * Which rules a request goes through, in the order they are written (docs/lists.md): a counting rule that
 * matches is kept for the one engine call; a matching `allow` rule ends the walk (no later rule applies); a
 * matching `deny` rule answers 403 naming itself. Neither action calls Redis: a rule's `match.list` is read
 * from the isolate's copy of the live lists (src/live/lists.ts).
 */
import type { ActionRule, KeyPart } from "../config";
import type { Mode, WaitUntil } from "../engine/types";
import { hashIdentity, recentHash } from "../engine/keys";
import { identityOfKey, needsVerification, plainIdentityOfKey, type RequestFacts } from "../identity";
import { compileMatch, type MatchTest } from "../rules/match";
import { effectiveMode, type LiveModes } from "../rules/modes";
import type { AddressBits } from "../util/address";
import { DeniedByRuleError } from "./errors";
import type { PlannedRule } from "./plan";

/** The isolate's live lists, as the limiter reads them (src/live/lists.ts). */
export interface ListLookup {
  /** Starts loading, in the background, every list whose version in `live` is not the one held. */
  sync(live: LiveModes, waitUntil: WaitUntil): void;
  /** Whether the list holds an entry (address or CIDR) containing `address`. */
  holdsAddress(list: string, address: AddressBits): boolean;
  /** Whether the list has identity entries at all (then the rule's key must be read to compare). */
  holdsIdentities(list: string): boolean;
  /** Whether the list holds this hashed identity. */
  holdsIdentity(list: string, identityHash: string): boolean;
}

/** One rule in the walk: a counting rule or an action rule, its match compiled. */
interface Step {
  matches: MatchTest;
  list: string | undefined;
  key: readonly KeyPart[];
  counting?: PlannedRule;
  action?: ActionRule;
}

/** The rules as written, counting and action rules interleaved (each action rule knows its place). */
export function stepsOf(rules: readonly PlannedRule[], actions: readonly ActionRule[]): Step[] {
  const steps: Step[] = [];
  const actionStep = (action: ActionRule): Step => ({
    matches: compileMatch(action.match),
    list: action.match.list,
    key: action.key,
    action,
  });
  rules.forEach((planned, i) => {
    for (const action of actions) if (action.before === i) steps.push(actionStep(action));
    const { rule } = planned;
    steps.push({
      matches: compileMatch(rule.match),
      list: rule.match.list,
      key: rule.key,
      counting: planned,
    });
  });
  for (const action of actions) if (action.before >= rules.length) steps.push(actionStep(action));
  return steps;
}

/** What the walk needs besides the request. */
export interface WalkContext {
  live: LiveModes;
  mode: Mode;
  lists: ListLookup | undefined;
  /** Told of each refusal by a `deny` rule, and of each it would make in monitor mode. */
  onAction?: ((rule: string, verdict: "denied" | "would-deny") => void) | undefined;
}

/**
 * The counting rules the request goes on to, or the 403 of the first `deny` rule (in mode `on`) it meets
 * before any `allow` rule. At once, without a promise, unless a live list's identity entries must be compared
 * with a key whose hash this isolate has not computed yet.
 */
export function walkRules(
  steps: readonly Step[],
  method: string,
  request: RequestFacts,
  context: WalkContext,
): PlannedRule[] | DeniedByRuleError | Promise<PlannedRule[] | DeniedByRuleError> {
  const matched: PlannedRule[] = [];
  const walk = (
    from: number,
  ): PlannedRule[] | DeniedByRuleError | Promise<PlannedRule[] | DeniedByRuleError> => {
    for (let i = from; i < steps.length; i++) {
      const step = steps[i] as Step;
      if (!step.matches(method, request)) continue;
      if (step.list !== undefined) {
        const listed = inList(context.lists, step.list, step.key, request);
        if (listed instanceof Promise) {
          return listed.then((yes) => {
            const ended = yes ? apply(step) : undefined;
            return ended ?? walk(i + 1);
          });
        }
        if (!listed) continue;
      }
      const ended = apply(step);
      if (ended) return ended;
    }
    return matched;
  };
  /** Takes one matching step; returns what ends the walk (an allow's rules so far, a deny's 403), if it does. */
  const apply = (step: Step): PlannedRule[] | DeniedByRuleError | undefined => {
    if (step.counting) {
      matched.push(step.counting);
      return undefined;
    }
    const action = step.action as ActionRule;
    const mode = effectiveMode(action, context.live, context.mode);
    if (mode === "off") return undefined;
    // An allow never blocks anything: in monitor mode too it takes the request out of the later rules, as it
    // will once on, so what monitor mode reports is what `on` would do.
    if (action.action === "allow") return matched;
    if (mode === "on") {
      context.onAction?.(action.name, "denied");
      return new DeniedByRuleError(action.name);
    }
    context.onAction?.(action.name, "would-deny");
    console.log(JSON.stringify({ event: "ratelimit.would_deny", rule: action.name, action: "deny" }));
    return undefined;
  };
  return walk(0);
}

/**
 * Whether a live list holds the request: its client IP within an address or CIDR entry, or the identity the
 * rule's key extracts among its identity entries. A list this isolate has not loaded yet holds nobody
 * (docs/lists.md, "A fresh isolate").
 */
function inList(
  lists: ListLookup | undefined,
  list: string,
  key: readonly KeyPart[],
  request: RequestFacts,
): boolean | Promise<boolean> {
  if (lists === undefined) return false;
  const address = request.clientAddress();
  if (address !== undefined && lists.holdsAddress(list, address)) return true;
  // A key of the client IP alone is answered by the address entries (an ip/64 prefix is a CIDR entry).
  if (!lists.holdsIdentities(list) || key.every((part) => part.kind === "ip" || part.kind === "ip64")) {
    return false;
  }
  const identity = needsVerification(key) ? identityOfKey(key, request) : plainIdentityOfKey(key, request);
  const held = (value: string | undefined): boolean | Promise<boolean> => {
    if (value === undefined) return false;
    const hash = recentHash(value);
    if (hash !== undefined) return lists.holdsIdentity(list, hash);
    return hashIdentity(value).then((h) => lists.holdsIdentity(list, h));
  };
  return identity instanceof Promise ? identity.then(held) : held(identity);
}
