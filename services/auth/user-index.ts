// Every user id in three orders (id, name, last activity), kept in memory by the auth store so that a page
// of `GET /hub/api/users?sort=…` at any offset is a slice of ids (O(limit)), never an OFFSET scan; and every
// name, so that `name_filter` is one native substring scan. Sized for a million users: no object per user.
//   - names: one byte arena of UTF-8 names (NUL after each: names hold no control character, shared/names.ts),
//     and a second arena of the lower-cased names that differ from their name (the hub lower-cases user names,
//     so it is nearly empty); an entry is appended per add or rename, and the dead ones are compacted away;
//   - per id (ids are SQLite's rowids: dense): its entry and its last activity in ms (0: never);
//   - the three orders: Int32Arrays of ids. An insert is a binary search plus one memmove; a batch is merged
//     in one pass from the end (O(n + k log n)), so a bulk create of thousands is one move of each array.
// Name order is byte order of UTF-8, which is SQLite's BINARY collation: the index and `ORDER BY name` agree.
// Nothing here spreads or recurses over a list whose length users decide.
import { type SortKey, type UserSort } from '../../shared/lists.js';

/** How many ids the cached searches may hold together (4 bytes each): the cache is bounded in bytes. */
const SEARCH_CACHE_IDS = 4_000_000;
/** At most this many searches are kept, the least recently used dropped first. */
const SEARCH_CACHE_SIZE = 32;

/** The next capacity: doubling while small, then a quarter more (a million users must not carry a million spare). */
const grown = (capacity: number, needed: number): number => Math.max(needed, capacity < 65_536 ? capacity * 2 : Math.ceil(capacity * 1.25));

/** A growable list of int32s (ids, or positions in an arena). */
class IntList {
  a: Int32Array;
  n = 0;
  constructor(capacity = 1024) {
    this.a = new Int32Array(capacity);
  }

  reserve(extra: number): void {
    if (this.n + extra <= this.a.length) return;
    const bigger = new Int32Array(grown(this.a.length, this.n + extra));
    bigger.set(this.a.subarray(0, this.n));
    this.a = bigger;
  }

  push(v: number): void {
    this.reserve(1);
    this.a[this.n++] = v;
  }

  removeAt(i: number): void {
    this.a.copyWithin(i, i + 1, this.n);
    this.n--;
  }

  /** A copy of the live part, as the orders are handed out. */
  view(): Int32Array {
    return this.a.subarray(0, this.n);
  }
}

/** Names one after the other as UTF-8, each followed by a NUL. */
class Arena {
  buf = Buffer.allocUnsafe(1 << 16);
  used = 0;

  /** Appends `text` and returns where it starts. */
  append(text: string): number {
    const need = Buffer.byteLength(text) + 1;
    this.reserve(need);
    const start = this.used;
    this.buf.write(text, start);
    this.buf[start + need - 1] = 0;
    this.used += need;
    return start;
  }

  reserve(bytes: number): void {
    if (this.used + bytes <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(grown(this.buf.length, this.used + bytes));
    this.buf.copy(bigger, 0, 0, this.used);
    this.buf = bigger;
  }

  /** Where the text starting at `start` ends (its NUL). */
  end(start: number): number {
    return this.buf.indexOf(0, start);
  }
}

export class UserIndex {
  private names = new Arena();
  /** lower-cased names that differ from their name, and the entry each belongs to */
  private lowers = new Arena();
  private lowerEntry = new IntList(64);
  private lowerStart = new IntList(64);
  /** per entry: where its name starts, the id it was made for, where its lower-cased name starts (-1: the name) */
  private nameStart = new IntList();
  private entryId = new IntList();
  private entryLower = new IntList();
  /** per id: its entry + 1 (0: no such user) */
  private entryOf = new Int32Array(1024);
  /** per id: last activity in epoch ms (0: never active) */
  private activity = new Float64Array(1024);
  private live = 0;

  private readonly byId = new IntList();
  private readonly byName = new IntList();
  /** ascending by (last activity, id), never-active users first: descending is this reversed, never-active last */
  private readonly byActivity = new IntList();
  /** searches' matching ids, dropped whole on any change */
  private readonly searches = new Map<string, Int32Array>();
  private cachedIds = 0;

  private readonly cmp: Record<SortKey, (a: number, b: number) => number> = {
    id: (a, b) => a - b,
    name: (a, b) => {
      const sa = this.nameStart.a[this.entryOf[a] - 1];
      const sb = this.nameStart.a[this.entryOf[b] - 1];
      // buf.compare(target…, source…) orders the source (a) against the target (b)
      return this.names.buf.compare(this.names.buf, sb, this.names.end(sb), sa, this.names.end(sa)) || a - b;
    },
    last_activity: (a, b) => this.activity[a] - this.activity[b] || a - b,
  };

  get size(): number {
    return this.live;
  }

  has(id: number): boolean {
    return id > 0 && id < this.entryOf.length && this.entryOf[id] !== 0;
  }

  /** Bytes held (arrays and arenas), for the README's figures and the memory test. */
  get bytes(): number {
    const lists = [this.lowerEntry, this.lowerStart, this.nameStart, this.entryId, this.entryLower, this.byId, this.byName, this.byActivity];
    let n = this.names.buf.length + this.lowers.buf.length + this.entryOf.byteLength + this.activity.byteLength;
    for (const l of lists) n += l.a.byteLength;
    return n + this.cachedIds * 4;
  }

  private order(key: SortKey): IntList {
    return key === 'id' ? this.byId : key === 'name' ? this.byName : this.byActivity;
  }

  private ensureId(id: number): void {
    if (!Number.isSafeInteger(id) || id <= 0 || id >= 2 ** 31) throw new Error(`user index: id ${id} is not a positive int32`);
    if (id < this.entryOf.length) return;
    const size = grown(this.entryOf.length, id + 1);
    const entries = new Int32Array(size);
    entries.set(this.entryOf);
    this.entryOf = entries;
    const times = new Float64Array(size);
    times.set(this.activity);
    this.activity = times;
  }

  /** A new entry for `id` named `name` (the old one, if any, is left dead). */
  private setName(id: number, name: string): void {
    const entry = this.nameStart.n;
    this.nameStart.push(this.names.append(name));
    this.entryId.push(id);
    const lower = name.toLowerCase();
    if (lower === name) this.entryLower.push(-1);
    else {
      const start = this.lowers.append(lower);
      this.entryLower.push(start);
      this.lowerStart.push(start);
      this.lowerEntry.push(entry);
    }
    this.entryOf[id] = entry + 1;
  }

  private nameOf(id: number): string {
    const start = this.nameStart.a[this.entryOf[id] - 1];
    return this.names.buf.toString('utf8', start, this.names.end(start));
  }

  /** First position in `list` whose id sorts at or after `id` (whose keys must be set), from `lo`. */
  private position(list: IntList, key: SortKey, id: number, lo = 0): number {
    const cmp = this.cmp[key];
    let hi = list.n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cmp(list.a[mid], id) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Merges `ids` (not yet in the order) into it: each position found in the old order, one move of each segment. */
  private insertMany(key: SortKey, ids: Int32Array): void {
    const list = this.order(key);
    const fresh = ids.slice().sort(this.cmp[key]);
    const k = fresh.length;
    const at = new Int32Array(k);
    let lo = 0;
    for (let i = 0; i < k; i++) lo = at[i] = this.position(list, key, fresh[i], lo);
    list.reserve(k);
    let end = list.n;
    for (let i = k - 1; i >= 0; i--) {
      list.a.copyWithin(at[i] + i + 1, at[i], end);
      list.a[at[i] + i] = fresh[i];
      end = at[i];
    }
    list.n += k;
  }

  private unlink(key: SortKey, id: number): void {
    const list = this.order(key);
    const i = this.position(list, key, id);
    if (list.a[i] === id) list.removeAt(i);
  }

  private changed(): void {
    if (this.searches.size) {
      this.searches.clear();
      this.cachedIds = 0;
    }
    // a rename or removal leaves its old entry dead: rebuild the arenas once they are mostly dead
    if (this.nameStart.n > 1024 && this.nameStart.n > 2 * this.live) this.compact();
  }

  private compact(): void {
    const old = { names: this.names, starts: this.nameStart, ids: this.entryId };
    this.names = new Arena();
    this.lowers = new Arena();
    this.lowerEntry = new IntList(64);
    this.lowerStart = new IntList(64);
    this.nameStart = new IntList(Math.max(1024, this.live));
    this.entryId = new IntList(Math.max(1024, this.live));
    this.entryLower = new IntList(Math.max(1024, this.live));
    for (let e = 0; e < old.starts.n; e++) {
      const id = old.ids.a[e];
      if (this.entryOf[id] !== e + 1) continue;
      const start = old.starts.a[e];
      this.setName(id, old.names.buf.toString('utf8', start, old.names.end(start)));
    }
  }

  // ---- loading (at start, in the background: see AuthStore) ----

  /** Sizes every array for what a load will bring (no growth, no slack): from the store's count, largest id and name bytes. */
  reserve(users: number, maxId: number, nameBytes: number): void {
    if (maxId > 0) this.ensureId(maxId);
    for (const list of [this.nameStart, this.entryId, this.entryLower, this.byId, this.byName, this.byActivity]) list.reserve(users);
    this.names.reserve(nameBytes + users);
  }

  /** Users read in ascending id order: each appended to the id order. The other orders come with finishLoad. */
  loadRows(rows: readonly { id: number; name: string; last_activity: string | null }[]): void {
    for (const r of rows) {
      if (this.has(r.id)) continue;
      this.ensureId(r.id);
      this.setName(r.id, r.name);
      this.activity[r.id] = r.last_activity ? Date.parse(r.last_activity) || 0 : 0;
      this.byId.push(r.id);
      this.live++;
    }
  }

  /** The name order as the store read it (SQLite's index on name: the same byte order), then the activity order. */
  finishLoad(idsByName: Int32Array): void {
    this.byName.reserve(idsByName.length);
    this.byName.a.set(idsByName, 0);
    this.byName.n = idsByName.length;
    const byActivity = this.byId.view().slice().sort(this.cmp.last_activity);
    this.byActivity.reserve(byActivity.length);
    this.byActivity.a.set(byActivity, 0);
    this.byActivity.n = byActivity.length;
    this.searches.clear();
    this.cachedIds = 0;
  }

  // ---- changes (each one sets a user's state, so replaying changes the loaded state already has is harmless) ----

  /** New users (never active); one already there under another name is renamed. */
  add(users: readonly { id: number; name: string }[]): void {
    const fresh = new Int32Array(users.length);
    let k = 0;
    for (const u of users) {
      if (this.has(u.id)) {
        this.rename(u.id, u.name);
        continue;
      }
      this.ensureId(u.id);
      this.setName(u.id, u.name);
      this.activity[u.id] = 0;
      fresh[k++] = u.id;
    }
    if (!k) return;
    for (const key of ['id', 'name', 'last_activity'] as const) this.insertMany(key, fresh.subarray(0, k));
    this.live += k;
    this.changed();
  }

  remove(id: number): void {
    if (!this.has(id)) return;
    for (const key of ['id', 'name', 'last_activity'] as const) this.unlink(key, id);
    this.entryOf[id] = 0;
    this.activity[id] = 0;
    this.live--;
    this.changed();
  }

  rename(id: number, name: string): void {
    if (!this.has(id) || this.nameOf(id) === name) return;
    this.unlink('name', id);
    this.setName(id, name);
    this.insertMany('name', Int32Array.of(id));
    this.changed();
  }

  /** Activity only moves forward (ISO times). */
  touch(id: number, at: string): void {
    const ms = Date.parse(at);
    if (!this.has(id) || !(ms > this.activity[id])) return;
    this.unlink('last_activity', id);
    this.activity[id] = ms;
    this.insertMany('last_activity', Int32Array.of(id));
    this.changed();
  }

  // ---- reads ----

  /** The id of the user named `name`, or 0: a binary search of the name order (the names' bytes, as it is sorted). */
  idOf(name: string): number {
    const key = Buffer.from(name, 'utf8');
    const list = this.byName;
    const nameAt = (i: number) => this.nameStart.a[this.entryOf[list.a[i]] - 1];
    let lo = 0;
    let hi = list.n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const s = nameAt(mid);
      if (this.names.buf.compare(key, 0, key.length, s, this.names.end(s)) < 0) lo = mid + 1;
      else hi = mid;
    }
    if (lo === list.n) return 0;
    const s = nameAt(lo);
    return this.names.buf.compare(key, 0, key.length, s, this.names.end(s)) === 0 ? list.a[lo] : 0;
  }

  /** Ids of one page of all users. */
  page(sort: UserSort, offset: number, limit: number): number[] {
    const list = this.order(sort.key);
    const out: number[] = [];
    if (!sort.desc) for (let i = offset; i < list.n && out.length < limit; i++) out.push(list.a[i]);
    else for (let i = list.n - 1 - offset; i >= 0 && out.length < limit; i--) out.push(list.a[i]);
    return out;
  }

  /**
   * A page of all users but the ids in `exclude` (a few: users with servers, for `?state=inactive`), O(k log n +
   * limit) at any offset: each excluded id's position in the order, then the page's start counted past them.
   */
  pageExcept(sort: UserSort, offset: number, limit: number, exclude: ReadonlySet<number>): number[] {
    const list = this.order(sort.key);
    // positions in the walking direction (from the end for a descending sort), ascending
    const skipped: number[] = [];
    for (const id of exclude) {
      if (!this.has(id)) continue;
      const p = this.position(list, sort.key, id);
      if (list.a[p] === id) skipped.push(sort.desc ? list.n - 1 - p : p);
    }
    skipped.sort((x, y) => x - y);
    // the k-th kept user stands at k plus the excluded positions at or before it
    let at = offset;
    let s = 0;
    while (s < skipped.length && skipped[s] <= at) { at++; s++; }
    const out: number[] = [];
    for (; at < list.n && out.length < limit; at++) {
      if (s < skipped.length && skipped[s] === at) { s++; continue; }
      out.push(list.a[sort.desc ? list.n - 1 - at : at]);
    }
    return out;
  }

  /** Some users (a filtered list) in the order a full list would show them. */
  sort(ids: readonly number[], sort: UserSort): number[] {
    const marked = new Uint8Array(this.entryOf.length);
    const found = new IntList(Math.max(16, ids.length));
    for (const id of ids) if (this.has(id) && !marked[id]) { marked[id] = 1; found.push(id); }
    return Array.from(this.inOrder(marked, found, sort));
  }

  /** The marked ids (also listed in `found`) in `sort` order: a sort of few, or one walk of the order for many. */
  private inOrder(marked: Uint8Array, found: IntList, sort: UserSort): Int32Array {
    if (found.n * 20 < this.live) {
      const out = found.view().slice().sort(this.cmp[sort.key]);
      return sort.desc ? out.reverse() : out;
    }
    const out = new Int32Array(found.n);
    let k = 0;
    const list = this.order(sort.key);
    if (!sort.desc) for (let i = 0; i < list.n; i++) { if (marked[list.a[i]]) out[k++] = list.a[i]; }
    else for (let i = list.n - 1; i >= 0; i--) if (marked[list.a[i]]) out[k++] = list.a[i];
    return out;
  }

  /**
   * Ids of the users whose name contains `search` (any case), in `sort` order: Buffer.indexOf over the name
   * arenas for a new search, then a cached list (bounded in bytes) until the index changes.
   */
  matching(search: string, sort: UserSort): Int32Array {
    const needle = search.toLowerCase();
    const cacheKey = `${sort.key}${sort.desc ? '-' : '+'}${needle}`;
    const hit = this.searches.get(cacheKey);
    if (hit) {
      this.searches.delete(cacheKey); // re-inserted last: the oldest search is the first key
      this.searches.set(cacheKey, hit);
      return hit;
    }
    const bytes = Buffer.from(needle);
    const marked = new Uint8Array(this.entryOf.length);
    const found = new IntList(64);
    const mark = (entry: number) => {
      const id = this.entryId.a[entry];
      if (this.entryOf[id] === entry + 1 && !marked[id]) { marked[id] = 1; found.push(id); }
    };
    // names that are their own lower case (nearly all): hits in the name arena
    this.scan(this.names, this.nameStart, bytes, (entry) => { if (this.entryLower.a[entry] === -1) mark(entry); });
    // the others: hits in the lower-case arena
    this.scan(this.lowers, this.lowerStart, bytes, (i) => mark(this.lowerEntry.a[i]));
    const ids = this.inOrder(marked, found, sort);
    this.remember(cacheKey, ids);
    return ids;
  }

  /** Every entry of `arena` (starts in `starts`, ascending) whose text contains `needle`, once each. */
  private scan(arena: Arena, starts: IntList, needle: Buffer, found: (i: number) => void): void {
    if (!starts.n) return;
    let from = 0;
    let i = 0;
    for (;;) {
      const at = needle.length ? arena.buf.indexOf(needle, from) : from;
      if (at < 0 || at >= arena.used) return;
      // the entry holding `at`: the last start at or before it, searched from the previous one
      let lo = i;
      let hi = starts.n - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (starts.a[mid] <= at) lo = mid;
        else hi = mid - 1;
      }
      found(lo);
      i = lo + 1;
      if (i >= starts.n) return;
      from = starts.a[i];
    }
  }

  private remember(key: string, ids: Int32Array): void {
    if (ids.length > SEARCH_CACHE_IDS) return;
    this.searches.set(key, ids);
    this.cachedIds += ids.length;
    for (const [oldest, cached] of this.searches) {
      if (this.searches.size <= SEARCH_CACHE_SIZE && this.cachedIds <= SEARCH_CACHE_IDS) break;
      this.searches.delete(oldest);
      this.cachedIds -= cached.length;
    }
  }
}
