// Pagination as the established hub does it: opt-in envelope by Accept header, offset/limit clamped.
import { hubUrl } from '../../../shared/urls.js';
import { errors } from '../../../shared/errors.js';
import type { RequestInfo } from '../http.js';

export const PAGINATION_MEDIA_TYPE = 'application/hub-pagination+json';
/** what clients written for the established hub send */
const ESTABLISHED_MEDIA_TYPE = 'application/jupyterhub-pagination+json';

export interface Page { offset: number; limit: number; envelope: boolean }

const MAX_OFFSET = 2 ** 31 - 1;

export function wantsEnvelope(info: RequestInfo): boolean {
  return (info.headers.accept ?? '').split(',').some((t) => {
    const type = t.trim().toLowerCase();
    return type === PAGINATION_MEDIA_TYPE || type === ESTABLISHED_MEDIA_TYPE;
  });
}

function integerParam(query: URLSearchParams, key: string): number | undefined {
  const raw = query.get(key);
  if (raw === null || raw === '') return undefined;
  if (!/^-?\d{1,15}$/.test(raw.trim())) throw errors.badRequest('Invalid argument type, offset and limit must be integers');
  return Math.abs(Number(raw));
}

/**
 * Without the envelope the default page is the maximum, so old clients still get up to that many. Lists that
 * came after pagination (shares, share codes) always answer with the envelope (`always`).
 */
export function parsePage(info: RequestInfo, query: URLSearchParams, defaultLimit: number, maxLimit: number, always = false): Page {
  const envelope = always || wantsEnvelope(info);
  // offsets travel as int32 to the actors: past that no list has items, and a larger one would wrap around
  const offset = Math.min(integerParam(query, 'offset') ?? 0, MAX_OFFSET);
  const asked = integerParam(query, 'limit');
  const limit = Math.max(1, Math.min(maxLimit, asked ?? (envelope ? defaultLimit : maxLimit)));
  return { offset, limit, envelope };
}

/** The plain list, or the envelope with `next.url` pointing at the following page (other query params kept). */
export function pageBody(info: RequestInfo, query: URLSearchParams, page: Page, items: unknown, total: number): unknown {
  if (!page.envelope) return items;
  let next: { offset: number; limit: number; url: string } | null = null;
  if (page.offset + page.limit < total) {
    const q = new URLSearchParams(query);
    q.set('offset', String(page.offset + page.limit));
    q.set('limit', String(page.limit));
    const proto = info.headers['x-forwarded-proto'] === 'https' ? 'https' : 'http';
    const host = info.headers.host ?? '127.0.0.1';
    next = { offset: page.offset + page.limit, limit: page.limit, url: `${proto}://${host}${hubUrl(info.path)}?${q}` };
  }
  return { items, _pagination: { offset: page.offset, limit: page.limit, total, next } };
}
