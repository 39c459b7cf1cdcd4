// Every user id in three orders (id, name, last activity), kept in memory by the auth store so that a page
// of `GET /hub/api/users?sort=…` at any offset is a slice of ids (O(limit)), never an OFFSET scan. Updates
// are a binary search plus an array splice (a memmove: tens of µs at 100,000 users). Name searches
// (`name_filter`) are answered here too: one pass over the lower-cased names in the asked order, kept
// until the index changes, so the next pages of one search are slices as well.
import { SORT_KEYS, type SortKey, type UserSort } from '../../shared/lists.js';

interface Entry { name: string; lower: string; activity: string }

/** How many searches keep their matching ids (per order) between pages. */
const SEARCH_CACHE_SIZE = 32;

export class UserIndex {
  private readonly entries = new Map<number, Entry>();
  private readonly byId: number[] = [];
  private readonly byName: number[] = [];
  /** ascending by (last_activity, id), never-active users ('') first: descending is this reversed, nulls last */
  private readonly byActivity: number[] = [];
  /** bumped on every change; a cached search of an older version is stale */
  private version = 0;
  private readonly searches = new Map<string, { version: number; ids: number[] }>();

  private readonly cmp: Record<SortKey, (a: number, b: number) => number> = {
    id: (a, b) => a - b,
    name: (a, b) => {
      const x = this.entries.get(a)!.name;
      const y = this.entries.get(b)!.name;
      return x < y ? -1 : x > y ? 1 : a - b;
    },
    last_activity: (a, b) => {
      const x = this.entries.get(a)!.activity;
      const y = this.entries.get(b)!.activity;
      return x < y ? -1 : x > y ? 1 : a - b;
    },
  };

  get size(): number {
    return this.byId.length;
  }

  private order(key: SortKey): number[] {
    return key === 'id' ? this.byId : key === 'name' ? this.byName : this.byActivity;
  }

  /** First position in `list` whose id sorts at or after `id` (which must be in `entries`). */
  private position(list: number[], key: SortKey, id: number): number {
    const cmp = this.cmp[key];
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cmp(list[mid], id) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private insert(key: SortKey, id: number): void {
    const list = this.order(key);
    list.splice(this.position(list, key, id), 0, id);
  }

  private unlink(key: SortKey, id: number): void {
    const list = this.order(key);
    const i = this.position(list, key, id);
    if (list[i] === id) list.splice(i, 1);
  }

  /** Loads many users at once (at start): one sort per order instead of an insert each. */
  load(rows: { id: number; name: string; last_activity: string | null }[]): void {
    for (const r of rows) {
      this.entries.set(r.id, { name: r.name, lower: r.name.toLowerCase(), activity: r.last_activity ?? '' });
      this.byId.push(r.id);
    }
    this.byId.sort(this.cmp.id);
    this.byName.push(...this.byId);
    this.byName.sort(this.cmp.name);
    this.byActivity.push(...this.byId);
    this.byActivity.sort(this.cmp.last_activity);
    this.version++;
  }

  /** New users (never active). A large batch is appended and sorted once rather than spliced in one by one. */
  add(users: { id: number; name: string }[]): void {
    const fresh = users.filter((u) => !this.entries.has(u.id));
    for (const u of fresh) this.entries.set(u.id, { name: u.name, lower: u.name.toLowerCase(), activity: '' });
    for (const key of SORT_KEYS) {
      if (fresh.length <= 32) {
        for (const u of fresh) this.insert(key, u.id);
      } else {
        const list = this.order(key);
        list.push(...fresh.map((u) => u.id));
        list.sort(this.cmp[key]);
      }
    }
    if (fresh.length) this.version++;
  }

  remove(id: number): void {
    if (!this.entries.has(id)) return;
    for (const key of SORT_KEYS) this.unlink(key, id);
    this.entries.delete(id);
    this.version++;
  }

  rename(id: number, name: string): void {
    const e = this.entries.get(id);
    if (!e || e.name === name) return;
    this.unlink('name', id);
    e.name = name;
    e.lower = name.toLowerCase();
    this.insert('name', id);
    this.version++;
  }

  /** Activity only moves forward (ISO times in one format compare as strings). */
  touch(id: number, activity: string): void {
    const e = this.entries.get(id);
    if (!e || activity <= e.activity) return;
    this.unlink('last_activity', id);
    e.activity = activity;
    this.insert('last_activity', id);
    this.version++;
  }

  /** Ids of one page of all users. */
  page(sort: UserSort, offset: number, limit: number): number[] {
    const list = this.order(sort.key);
    if (!sort.desc) return list.slice(offset, offset + limit);
    const out: number[] = [];
    for (let i = list.length - 1 - offset; i >= 0 && out.length < limit; i--) out.push(list[i]);
    return out;
  }

  /** A page of all users but those named in `exclude` (e.g. users with servers): a walk of the order, no sort. */
  pageExcept(sort: UserSort, offset: number, limit: number, exclude: ReadonlySet<string>): number[] {
    const list = this.order(sort.key);
    const out: number[] = [];
    let skip = offset;
    for (let k = 0; k < list.length && out.length < limit; k++) {
      const id = list[sort.desc ? list.length - 1 - k : k];
      if (exclude.has(this.entries.get(id)!.name)) continue;
      if (skip > 0) skip--;
      else out.push(id);
    }
    return out;
  }

  /** Some users (a filtered list) in the same order a full list would show them. */
  sort(ids: number[], sort: UserSort): number[] {
    const known = ids.filter((id) => this.entries.has(id)).sort(this.cmp[sort.key]);
    return sort.desc ? known.reverse() : known;
  }

  /**
   * Ids of the users whose name contains `search` (any case), in `sort` order: one pass over the names
   * (~1 ms per 100,000 users) for a new search, then a cached list until the index changes.
   */
  matching(search: string, sort: UserSort): number[] {
    const needle = search.toLowerCase();
    const cacheKey = `${sort.key}${sort.desc ? '-' : '+'}${needle}`;
    const hit = this.searches.get(cacheKey);
    this.searches.delete(cacheKey); // re-inserted last: the oldest search is the first key
    if (hit && hit.version === this.version) {
      this.searches.set(cacheKey, hit);
      return hit.ids;
    }
    const ids: number[] = [];
    for (const id of this.order(sort.key)) if (this.entries.get(id)!.lower.includes(needle)) ids.push(id);
    if (sort.desc) ids.reverse();
    this.searches.set(cacheKey, { version: this.version, ids });
    if (this.searches.size > SEARCH_CACHE_SIZE) this.searches.delete(this.searches.keys().next().value!);
    return ids;
  }
}
