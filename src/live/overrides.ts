/**
 * Which identities have an override, per isolate, so that the decision script reads an override key only
 * for those (an override read is one billed Redis command, and almost no identity has an override).
 *
 * In Redis: a set at `<prefix>:overrides` with one member `<rule>|<hash>` per override written through the
 * admin API (no TTL, like the overrides themselves; a member whose override has expired only costs the
 * read it would have cost anyway). An isolate loads the set once, with its first read of the live modes,
 * and then follows the admin change log (changes.ts), which says for each change whether an override now
 * exists. So a new override applies from the very next request of the isolate that wrote it, and
 * everywhere else within one live-mode refresh (about a second) plus one Redis read.
 * Until the set is loaded (its read failed or timed out), every call reads its override: never wrong,
 * only one command dearer.
 */

/** The Redis key of the override index. */
export const overrideIndexKey = (prefix: string): string => `${prefix}:overrides`;

const member = (rule: string, identityHash: string): string => `${rule}|${identityHash}`;

/** One isolate's copy of the override index. */
export class OverrideIndex {
  private members: Set<string> | undefined;

  /** True once the set was read from Redis. */
  get loaded(): boolean {
    return this.members !== undefined;
  }

  /** Whether the decision must read this identity's override (always, while the index is not loaded). */
  has(rule: string, identityHash: string): boolean {
    if (this.members === undefined) return true;
    return this.members.size > 0 && this.members.has(member(rule, identityHash)); // most have none: no key made
  }

  /** Records that an override now exists (`true`) or not (`false`). Ignored until loaded. */
  set(rule: string, identityHash: string, exists: boolean): void {
    if (exists) this.members?.add(member(rule, identityHash));
    else this.members?.delete(member(rule, identityHash));
  }

  /** Replaces the whole copy with the set's members as read from Redis. */
  replace(members: readonly unknown[]): void {
    this.members = new Set(members.map(String));
  }

  /** Forgets the copy: the next load reads the whole set again (changes were missed). */
  invalidate(): void {
    this.members = undefined;
  }
}

/** The index member of one identity under one rule. */
export const overrideIndexMember = (rule: string, identityHash: string): string => member(rule, identityHash);
