/**
 * A live list's change log (docs/lists.md, "How an edit reaches every isolate"): what lua/list-write.lua records
 * with every write, so that an isolate holding the list applies the change instead of reading the whole list
 * again. In Redis, beside the list in its hash slot: `<prefix>:list:{<name>}:log`, a Redis list, newest first,
 * of items `"<run>:<seq>\n"` + one line per entry changed (`+<score> <member>` added, `-<member>` removed, in
 * the order applied), or `"*"` for a change an isolate must read whole (a replace, a delete, a change of more
 * than LIST_LOG_MOST entries). A run starts when the log is empty (new, or expired): seqs restart under a new
 * run id, which no isolate holds, so it reads the list whole.
 */

/** The Redis key of a list's change log (the list's hash tag: one Redis Cluster slot). */
export const listLogKey = (prefix: string, name: string): string => `${prefix}:list:{${name}}:log`;

/** Items the log keeps: an isolate that missed more writes than that reads the list whole. */
export const LIST_LOG_ITEMS = 64;
/** How long the log outlives its last write, ms: a day. */
export const LIST_LOG_TTL_MS = 86_400_000;
/** The most entries one item logs; a bigger change is logged as "read it whole". */
export const LIST_LOG_MOST = 1000;
/** Items an isolate reads first (one edit since its last read is the common case); then all it keeps. */
export const LIST_LOG_FIRST_READ = 8;

/** One entry changed: added (with when it expires, ms; 0 = never) or removed. */
export type ListEdit = { member: string; expiresAtMs: number } | { member: string; removed: true };

/** One logged write. `edits` undefined: read the list whole. */
export interface LogItem {
  id: string;
  edits: ListEdit[] | undefined;
}

/** An item as the script wrote it. */
export function parseLogItem(text: string): LogItem {
  const lines = text.split("\n");
  const id = lines[0] ?? "";
  if (lines[1] === "*") return { id, edits: undefined };
  const edits: ListEdit[] = [];
  for (const line of lines.slice(1)) {
    if (line.startsWith("-")) edits.push({ member: line.slice(1), removed: true });
    else if (line.startsWith("+")) {
      const space = line.indexOf(" ");
      const score = line.slice(1, space);
      const expiresAtMs = score === "inf" || score === "+inf" ? 0 : Number(score);
      edits.push({ member: line.slice(space + 1), expiresAtMs });
    }
  }
  return { id, edits };
}

/**
 * The edits logged after the item `heldId` (oldest first), from the log's newest items: `undefined` when the
 * list must be read whole (`heldId` is not among them: too many writes since, another run, or no id held; or an
 * item between says so).
 */
export function editsSince(
  heldId: string | undefined,
  newestFirst: readonly unknown[],
): ListEdit[] | undefined {
  if (heldId === undefined) return undefined;
  const items: LogItem[] = [];
  for (const text of newestFirst) {
    const item = parseLogItem(String(text));
    if (item.id === heldId) {
      const edits: ListEdit[] = [];
      for (const newer of items.reverse()) {
        if (newer.edits === undefined) return undefined;
        edits.push(...newer.edits);
      }
      return edits;
    }
    items.push(item);
  }
  return undefined;
}
