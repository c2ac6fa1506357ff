/**
 * A Map that holds at most `capacity` entries and drops the least recently set one first. Per-isolate
 * caches use it so that no client population can grow an isolate's memory without bound. Holds whatever it
 * is given: callers keep plain values in it, never I/O objects (workerd ties those to a request); a promise
 * one request may await while another settles it must settle even if that other request is cancelled, and
 * be awaited with a bound (the flights of src/leases/table.ts; `Flight` in src/leases/lease.ts).
 */
export class BoundedMap<K, V> extends Map<K, V> {
  /**
   * Where eviction goes on from: a Map iterator kept across calls. A Map keeps insertion order, and an entry set
   * again is deleted and appended, so the next key this iterator yields is always the least recently set one.
   * A fresh `keys().next()` per eviction would be as right, but V8 leaves a deleted entry's slot in place until
   * the table is rebuilt, and each fresh iterator walks every such slot from the start: with a new identity per
   * request (every set an eviction, thousands of slots deleted) that walk cost tens of µs per set. The kept
   * iterator walks each slot once.
   */
  private oldest: Iterator<K> | undefined;

  /** @param capacity most entries held; 0 or less holds nothing. */
  constructor(readonly capacity: number) {
    super();
  }

  /** Sets `key` as the most recent entry, dropping the oldest one when over capacity. */
  override set(key: K, value: V): this {
    if (this.capacity <= 0) return this;
    super.delete(key); // re-insert at the end: insertion order is eviction order
    super.set(key, value);
    if (this.size > this.capacity) this.dropOldest();
    return this;
  }

  private dropOldest(): void {
    let next = this.oldest?.next();
    // None yet, or one that ran out (a finished iterator stays finished, entries added since or not).
    if (next === undefined || next.done) {
      this.oldest = this.keys();
      next = this.oldest.next();
    }
    super.delete(next.value as K);
  }
}
