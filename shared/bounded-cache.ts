// A cache bounded in bytes and by age: what the gateway remembers between requests (caches.ts) and the tokens
// actor's owners, so that a hub of a million users never keeps an entry for every user it ever served.

/** Roughly what V8 spends on a string of this text (header and one byte a character; names are mostly ASCII). */
export const stringBytes = (s: string): number => 24 + s.length;
/** A Map entry, its wrapper object and the key. */
const ENTRY_BYTES = 96;

/**
 * A Map bounded in bytes (oldest first out, by an estimate of each value's size) and by age per entry: a hub of
 * a million users must not grow a cache entry per user it ever served. `onDrop` hears every entry that leaves.
 */
export class BoundedCache<V> {
  private entries = new Map<string, { value: V; until: number; bytes: number }>();
  private held = 0;
  private evictFrom: Iterator<string> | undefined;
  constructor(
    private readonly maxBytes: number,
    private readonly maxAgeMs: number,
    private readonly sizeOf: (value: V) => number,
    private readonly onDrop?: (key: string, value: V) => void,
  ) {}

  /** The estimated bytes held (keys, values, entries). */
  get bytes(): number {
    return this.held;
  }

  get size(): number {
    return this.entries.size;
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until <= Date.now()) {
      this.delete(key);
      return undefined;
    }
    return e.value;
  }

  set(key: string, value: V, untilMs = Infinity): void {
    this.delete(key);
    const bytes = ENTRY_BYTES + stringBytes(key) + this.sizeOf(value);
    this.entries.set(key, { value, until: Math.min(untilMs, Date.now() + this.maxAgeMs), bytes });
    this.held += bytes;
    // bounded: each turn removes one entry, and the new one stays even if it alone is over the bound
    while (this.held > this.maxBytes && this.entries.size > 1) this.delete(this.oldest());
  }

  /**
   * The oldest key, from one iterator kept across calls: `keys().next()` afresh walks over every slot the
   * evicted entries left at the front of V8's table, O(n) per eviction; the kept one resumes where it was
   * (everything before it was evicted or deleted; a re-set key moved to the end and is met again there).
   */
  private oldest(): string {
    let next = this.evictFrom?.next();
    if (!next || next.done) {
      this.evictFrom = this.entries.keys();
      next = this.evictFrom.next();
    }
    return next.value!;
  }

  delete(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    this.held -= e.bytes;
    this.onDrop?.(key, e.value);
  }

  clear(): void {
    for (const key of [...this.entries.keys()]) this.delete(key);
  }
}
