// Names of users, groups, services and servers end up in URLs, scope filters, subjects and logs:
// one rule for all of them, applied wherever a name enters the hub.

const MAX_NAME_LENGTH = 255;

/** Why `name` is not acceptable, or null when it is. */
export function invalidNameReason(name: string): string | null {
  if (name.length === 0) return 'empty';
  if (name.length > MAX_NAME_LENGTH) return `longer than ${MAX_NAME_LENGTH} characters`;
  if (name.includes('/')) return "contains '/'";
  if (name === '.' || name === '..') return "'.' and '..' are not names";
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name)) return 'contains a control character';
  if (name.trim() !== name) return 'starts or ends with whitespace';
  return null;
}

/**
 * User names are compared lower-cased, as the established hub normalises them, then renamed by
 * `Authenticator.username_map` (a login name → the hub user, e.g. an identity provider's name → the
 * system account `localprocess` runs the server as).
 */
export function normalizeUsername(name: string, usernameMap: Readonly<Record<string, string>> = {}): string {
  const lower = name.toLowerCase();
  return Object.hasOwn(usernameMap, lower) ? usernameMap[lower].toLowerCase() : lower;
}
