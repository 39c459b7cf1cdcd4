// /hub/user-redirect/<path>: a link that names no user (JupyterLab's shareable links, documentation) sends each
// person to the same path on their own server, `/user/<name>/<path>`, as the established hub does.
import { serverUrl } from '../../../shared/servers.js';
import { localPath } from './redirects.js';

export const USER_REDIRECT = '/hub/user-redirect';

/** A segment percent-decoded as far as a later reader might (three rounds, as localPath), or null when malformed. */
function decoded(segment: string): string | null {
  let out = segment;
  for (let i = 0; i < 3; i++) {
    try {
      const again = decodeURIComponent(out);
      if (again === out) break;
      out = again;
    } catch {
      return null;
    }
  }
  return out;
}

/**
 * Where `/hub/user-redirect<rest>?<query>` sends `user`: `/user/<user>/<rest>?<query>`, the segments kept as
 * given (still percent-encoded). Null when the path could leave the user's prefix or be read as another
 * host: an empty segment (`//evil.com`), `.` or `..`, or a segment hiding `/`, `\` or a control character
 * behind percent-encoding.
 */
export function userRedirectTarget(user: string, rest: string, query: string): string | null {
  if (rest !== '' && !rest.startsWith('/')) return null;
  const segments = rest === '' ? [] : rest.slice(1).split('/');
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    // only the last segment may be empty: a trailing slash
    if (seg === '') {
      if (i === segments.length - 1) continue;
      return null;
    }
    const plain = decoded(seg);
    // eslint-disable-next-line no-control-regex
    if (plain === null || plain === '.' || plain === '..' || /[/\\\u0000-\u001f\u007f]/.test(plain) || seg.includes('\\')) return null;
  }
  const prefix = serverUrl(user, '');
  const path = prefix + segments.join('/');
  // the same rule as every other redirect target, and never outside the user's own prefix
  if (localPath(path) !== path || !path.startsWith(prefix)) return null;
  return query ? `${path}?${query}` : path;
}
