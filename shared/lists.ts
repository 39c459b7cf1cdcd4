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
