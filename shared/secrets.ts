// Secrets at rest: tokens and client secrets are stored as `sha512:<rounds>:<salt>:<digest>`, looked up
// by a short prefix and compared in constant time. The plaintext exists only in the response that made it.
import crypto, { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export const TOKEN_PREFIX_LENGTH = 4;

/** Generated tokens are random (128 bits): one round suffices. Tokens people choose get many rounds. */
export const GENERATED_ROUNDS = 1;
export const SUPPLIED_ROUNDS = 16_384;

export function newToken(): string {
  return randomBytes(16).toString('hex');
}

export function tokenPrefix(token: string): string {
  return token.slice(0, TOKEN_PREFIX_LENGTH);
}

function digest(token: string, salt: string, rounds: number): string {
  const h = createHash('sha512').update(salt);
  for (let i = 0; i < rounds; i++) h.update(token);
  return h.digest('hex');
}

export function hashSecret(token: string, rounds: number): string {
  const salt = randomBytes(8).toString('hex');
  return `sha512:${rounds}:${salt}:${digest(token, salt, rounds)}`;
}

export function verifySecret(token: string, hashed: string): boolean {
  const [algorithm, rounds, salt, expected] = hashed.split(':');
  if (algorithm !== 'sha512' || !salt || !expected) return false;
  const n = Number(rounds);
  if (!Number.isInteger(n) || n < 1 || n > 1_000_000) return false;
  const actual = Buffer.from(digest(token, salt, n), 'hex');
  const want = Buffer.from(expected, 'hex');
  return actual.length === want.length && timingSafeEqual(actual, want);
}

/** A fixed-size, non-reversible key for caches of token resolutions (never the token itself). */
export function cacheKey(token: string): string {
  return sha256(token);
}

/** Node's one-shot hash (20.12+) skips the Hash object a token check would otherwise make on every request. */
const sha256: (data: string) => string = typeof crypto.hash === 'function'
  ? (data) => crypto.hash('sha256', data, 'base64url')
  : (data) => createHash('sha256').update(data).digest('base64url');
