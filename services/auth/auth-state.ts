// Auth state at rest: what a login returned (provider tokens, user info, directory attributes), kept per user and
// encrypted with NaCl's secretbox (XSalsa20-Poly1305) under HUB_CRYPT_KEY, as the established hub keeps it under
// JUPYTERHUB_CRYPT_KEY (also read). Several keys separated by ";" rotate: the first encrypts, every one decrypts.
// Only the auth actor ever gets the key (the supervisor hands it to no other process).
import { randomBytes } from 'node:crypto';
import nacl from 'tweetnacl';

export { parseCryptKeys } from '../../shared/secrets.js';

const FORMAT = 'nacl1';

export class AuthStateCrypt {
  constructor(private readonly keys: readonly Uint8Array[]) {
    if (!keys.length) throw new Error('AuthStateCrypt needs at least one key');
  }

  encrypt(state: Record<string, unknown>): string {
    const nonce = new Uint8Array(randomBytes(nacl.secretbox.nonceLength));
    const box = nacl.secretbox(new Uint8Array(Buffer.from(JSON.stringify(state), 'utf8')), nonce, this.keys[0]);
    return `${FORMAT}:${Buffer.from(nonce).toString('base64')}:${Buffer.from(box).toString('base64')}`;
  }

  /** The state, or null when no key opens it (a key rotated away) or it is not ours: the login then has none. */
  decrypt(sealed: string | undefined | null): Record<string, unknown> | null {
    if (!sealed) return null;
    const [format, nonce64, box64] = sealed.split(':');
    if (format !== FORMAT || !nonce64 || !box64) return null;
    const nonce = new Uint8Array(Buffer.from(nonce64, 'base64'));
    const box = new Uint8Array(Buffer.from(box64, 'base64'));
    if (nonce.length !== nacl.secretbox.nonceLength) return null;
    for (const key of this.keys) {
      const opened = nacl.secretbox.open(box, nonce, key);
      if (!opened) continue;
      try {
        const value = JSON.parse(Buffer.from(opened).toString('utf8')) as unknown;
        return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
      } catch {
        return null;
      }
    }
    return null;
  }

  /** Whether `sealed` was made with an older key (re-encrypted with the first at the next write). */
  needsRotation(sealed: string): boolean {
    const [, nonce64, box64] = sealed.split(':');
    if (!nonce64 || !box64) return false;
    return !nacl.secretbox.open(new Uint8Array(Buffer.from(box64, 'base64')), new Uint8Array(Buffer.from(nonce64, 'base64')), this.keys[0]);
  }
}

/** The value at a dotted path of an auth state ("access_token", "oauth_user.email"), as an environment string. */
export function authStateField(state: Record<string, unknown> | null, path: string): string | undefined {
  let v: unknown = state;
  for (const part of path.split('.')) {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
    v = (v as Record<string, unknown>)[part];
  }
  if (v === undefined || v === null) return undefined;
  return typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : JSON.stringify(v);
}
