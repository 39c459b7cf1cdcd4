// Cookies: sealed (encrypted and authenticated, tweetnacl secretbox) under the hub's cookie secret,
// and the header syntax. Changing the secret makes every sealed cookie unreadable: all logins end.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import nacl from 'tweetnacl';

/** Config value, else HUB_COOKIE_SECRET, else a secret generated once into the data dir (0600). */
export function resolveCookieSecret(configured: string, env: NodeJS.ProcessEnv, dataDir: string): string {
  if (configured) return configured.toLowerCase();
  const fromEnv = env.HUB_COOKIE_SECRET;
  if (fromEnv) {
    if (!/^[0-9a-fA-F]{64}$/.test(fromEnv)) throw new Error('HUB_COOKIE_SECRET: expected 64 hex characters (32 bytes)');
    return fromEnv.toLowerCase();
  }
  const file = join(dataDir, 'cookie_secret');
  if (existsSync(file)) {
    const stored = readFileSync(file, 'utf8').trim();
    if (/^[0-9a-f]{64}$/.test(stored)) return stored;
  }
  const fresh = randomBytes(32).toString('hex');
  writeFileSync(file, `${fresh}\n`, { mode: 0o600 });
  return fresh;
}

export class CookieSealer {
  private readonly key: Uint8Array;

  constructor(secretHex: string) {
    this.key = new Uint8Array(Buffer.from(secretHex, 'hex'));
    if (this.key.length !== nacl.secretbox.keyLength) throw new Error('cookie secret must be 32 bytes');
  }

  seal(payload: unknown): string {
    const nonce = nacl.randomBytes(nacl.secretbox.nonceLength);
    const box = nacl.secretbox(new TextEncoder().encode(JSON.stringify(payload)), nonce, this.key);
    return Buffer.concat([nonce, box]).toString('base64url');
  }

  /** The payload, or null for anything forged, truncated, or sealed under another secret. */
  open<T>(value: string | undefined): T | null {
    if (!value || value.length > 4096) return null;
    const raw = new Uint8Array(Buffer.from(value, 'base64url'));
    if (raw.length <= nacl.secretbox.nonceLength) return null;
    const plain = nacl.secretbox.open(raw.subarray(nacl.secretbox.nonceLength), raw.subarray(0, nacl.secretbox.nonceLength), this.key);
    if (!plain) return null;
    try {
      return JSON.parse(new TextDecoder().decode(plain)) as T;
    } catch {
      return null;
    }
  }

  /** A keyed digest (for XSRF tokens bound to a session). */
  mac(text: string): string {
    return createHmac('sha256', this.key).update(text).digest('base64url');
  }
}

export function macEquals(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    const name = part.slice(0, i).trim();
    if (!(name in out)) out[name] = part.slice(i + 1).trim();
  }
  return out;
}

export interface CookieOptions {
  path: string;
  maxAgeSeconds?: number;   // absent: a browser-session cookie; 0: delete
  httpOnly?: boolean;
  secure?: boolean;
  sameSite?: 'Lax' | 'Strict';
}

export function serializeCookie(name: string, value: string, o: CookieOptions): string {
  const parts = [`${name}=${value}`, `Path=${o.path}`];
  if (o.maxAgeSeconds !== undefined) parts.push(`Max-Age=${Math.floor(o.maxAgeSeconds)}`);
  if (o.maxAgeSeconds === 0) parts.push('Expires=Thu, 01 Jan 1970 00:00:00 GMT');
  if (o.httpOnly !== false) parts.push('HttpOnly');
  if (o.secure) parts.push('Secure');
  parts.push(`SameSite=${o.sameSite ?? 'Lax'}`);
  return parts.join('; ');
}
