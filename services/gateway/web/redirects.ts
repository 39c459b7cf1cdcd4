// Where the hub may send a browser after login: only a path of this hub, never another site.
import { underBase } from '../../../shared/urls.js';

/**
 * `next` as a local path under Hub.base_url (one without it gets it, as the established hub does), or null. Refused: absolute URLs, scheme-relative `//host`, `/\host` (browsers
 * read `\` as `/`), and the same hidden behind percent-encoding or control characters.
 */
export function localPath(next: string | null | undefined): string | null {
  if (!next || next.length > 2048) return null;
  let decoded = next;
  for (let i = 0; i < 3; i++) {
    try {
      const again = decodeURIComponent(decoded);
      if (again === decoded) break;
      decoded = again;
    } catch {
      return null;
    }
  }
  for (const candidate of [next, decoded]) {
    // eslint-disable-next-line no-control-regex
    if (!candidate.startsWith('/') || /^\/[\\/]/.test(candidate) || /[\u0000-\u001f\u007f]/.test(candidate) || candidate.includes('\\')) return null;
  }
  return underBase(next);
}
