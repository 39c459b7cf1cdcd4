// Hub.base_url: the path under which the hub's whole URL space lives ('/' or '/jupyter/'). The hub routes its
// own paths without it (`/hub/home`, `/hub/api/users`), so every URL the hub gives out — pages, redirects,
// cookie paths, a server's or a service's prefix, OAuth redirect URIs, the environment of what it starts — is
// made here, with the prefix in front. One process serves one config, so the base is set once at start
// (`useBaseUrl`, by runActor and the supervisor) and read by every builder; nothing is computed at import time.

/** `jupyter` → `/jupyter/`, `/a/b` → `/a/b/`, `` → `/`: a leading and a trailing slash, no doubled ones. */
export function normaliseBaseUrl(value: string): string {
  const inner = value.split('/').filter(Boolean).join('/');
  return inner ? `/${inner}/` : '/';
}

/** Why a Hub.base_url cannot be used (segments of plain URL characters only, so it never needs encoding), or null. */
export function invalidBaseUrlReason(value: string): string | null {
  return /^\/?([A-Za-z0-9._~-]+\/?)*$/.test(value) && !/(^|\/)\.\.?(\/|$)/.test(value)
    ? null
    : 'expected a path of letters, digits and "._~-" segments, e.g. /jupyter/';
}

let base = '/';

/** Sets this process's base once its config is read (normalised again, so any spelling works). */
export function useBaseUrl(value: string): void {
  base = normaliseBaseUrl(value);
}

/** Hub.base_url as normalised: `/` or `/jupyter/`. */
export const baseUrl = (): string => base;

/**
 * A path of the hub's own URL space as browsers, servers and services reach it: `/hub/home` → `/jupyter/hub/home`,
 * `/user/alice/` → `/jupyter/user/alice/`. `path` starts with `/`.
 */
export function hubUrl(path: string): string {
  return underPrefix(base, path);
}

/** `path` (starting with `/`) under a normalised base: the one join every builder uses. */
export function underPrefix(prefix: string, path: string): string {
  return prefix === '/' ? path : prefix + path.slice(1);
}

/** `/jupyter/hub/` (the hub's pages and API; also where its cookies live). */
export const hubPrefix = (): string => hubUrl('/hub/');

/**
 * A request path as the hub routes it: without the base (`/jupyter/hub/api` → `/hub/api`; `/jupyter` → `/`),
 * or null when it lies outside the base. With base `/` the path itself (no new string).
 */
export function withinBase(path: string): string | null {
  if (base === '/') return path;
  if (path.startsWith(base)) return path.slice(base.length - 1);
  return path === base.slice(0, -1) ? '/' : null;
}

/**
 * Where a request outside the base is sent: `/` → `/jupyter/hub/`; a path of the hub's own spaces as it would be
 * without a base (`/hub/…`, `/user/…`, `/services/…`) to the same path under it; anything else into the hub's
 * pages (`/foo` → `/jupyter/hub/foo`), as the established hub does. Always a path under the base, never another site.
 */
export function intoBase(path: string): string {
  const p = path.startsWith('/') ? path : `/${path}`;
  return /^\/(hub|user|services)(\/|$)/.test(p) ? hubUrl(p) : hubUrl(`/hub${p}`);
}

/**
 * `next` as the established hub takes it: a local path that does not start with the base gets the base in
 * front (`/hub/home` → `/jupyter/hub/home`). The caller has already checked it is a local path.
 */
export function underBase(path: string): string {
  return base === '/' || path.startsWith(base) ? path : hubUrl(path);
}
