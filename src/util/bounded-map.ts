/**
 * A Map that holds at most `capacity` entries and drops the least recently set one first. Per-isolate
 * caches use it so that no client population can grow an isolate's memory without bound. Holds whatever it
 * is given: callers keep plain values in it, never I/O objects (workerd ties those to a request); a promise
 * one request may await while another settles it must settle even if that other request is cancelled, and
 * be awaited with a bound (the flights of src/leases/table.ts; `Flight` in src/leases/lease.ts).
 */
export class BoundedMap<K, V> extends Map<K, V> {
  /** @param capacity most entries held; 0 or less holds nothing. */
  constructor(readonly capacity: number) {
    super();
  }

  /** Sets `key` as the most recent entry, dropping the oldest one when over capacity. */
  override set(key: K, value: V): this {
    if (this.capacity <= 0) return this;
    super.delete(key); // re-insert at the end: insertion order is eviction order
    super.set(key, value);
    if (this.size > this.capacity) super.delete(this.keys().next().value as K);
    return this;
  }
}
