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

// ---- the auth state key (Authenticator.enable_auth_state) ----

/** Read by the supervisor (checked before anything starts) and handed to the auth actor alone. */
export const CRYPT_KEY_ENV = 'HUB_CRYPT_KEY';
export const CRYPT_KEY_ALIAS_ENV = 'JUPYTERHUB_CRYPT_KEY';

/** The keys named by the environment, or the problem with them (each key: 32 bytes as 64 hex digits). */
export function parseCryptKeys(env: NodeJS.ProcessEnv): { keys: Uint8Array[] } | { problem: string } {
  const raw = env[CRYPT_KEY_ENV] || env[CRYPT_KEY_ALIAS_ENV] || '';
  const parts = raw.split(';').map((k) => k.trim()).filter(Boolean);
  if (!parts.length) return { problem: `${CRYPT_KEY_ENV} is not set (Authenticator.enable_auth_state needs it: \`openssl rand -hex 32\`)` };
  const bad = parts.findIndex((k) => !/^[0-9a-fA-F]{64}$/.test(k));
  if (bad >= 0) return { problem: `${CRYPT_KEY_ENV}: key ${bad + 1} of ${parts.length} is not 32 bytes written as 64 hex digits` };
  return { keys: parts.map((k) => new Uint8Array(Buffer.from(k, 'hex'))) };
}

