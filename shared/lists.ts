// The orders `GET /hub/api/users?sort=` offers, shared by the gateway (checks the query) and the auth actor
// (keeps the orders): `id` (default), `name`, `last_activity`, each descending with a `-` prefix.
import { errors } from './errors.js';

export type SortKey = 'id' | 'name' | 'last_activity';
export const SORT_KEYS: readonly SortKey[] = ['id', 'name', 'last_activity'];

export interface UserSort { key: SortKey; desc: boolean }

/** `name`, `-last_activity`, … → the sort; a 400 naming the choices for anything else (`--id` too). */
export function parseSort(s: string): UserSort {
  const desc = s.startsWith('-');
  const key = desc ? s.slice(1) : s;
  if (!(SORT_KEYS as readonly string[]).includes(key)) {
    throw errors.badRequest(`sort must be 'id', 'name', or 'last_activity', not ${JSON.stringify(s.slice(0, 40))}`);
  }
  return { key: key as SortKey, desc };
}

/**
 * Appends every item of `items` to `into`: `into.push(...items)` passes each item as an argument on the stack
 * and throws RangeError past ~120,000 of them, so no call spreads a list (test/contracts/no-spread.test.ts).
 */
export function pushAll<T>(into: T[], items: Iterable<T>): T[] {
  for (const item of items) into.push(item);
  return into;
}

/**
 * Every member of a group: the model's first members, then the auth actor's GroupMembers pages after the last
 * of them (a group of a million never travels in one message). Bounded by the group's own size.
 */
export async function everyMember(
  group: { users: string[]; more_members_after: number },
  page: (after: number) => Promise<{ users: string[]; next_after: number }>,
): Promise<string[]> {
  const out = [...group.users];
  for (let after = group.more_members_after; after > 0;) {
    const next = await page(after);
    pushAll(out, next.users);
    after = next.next_after;
  }
  return out;
}
