// Fernet (the `cryptography` package's spec: version byte 0x80, 8-byte big-endian timestamp, 16-byte IV,
// AES-128-CBC ciphertext with PKCS#7 padding, HMAC-SHA256 over all of that; base64url), as the established hub keeps
// auth state under JUPYTERHUB_CRYPT_KEY through a MultiFernet of its keys. Only reading is needed here: the import
// opens what it stored and this hub keeps it under its own key (services/auth/auth-state.ts).
import { createDecipheriv, createHmac, timingSafeEqual } from 'node:crypto';

const VERSION = 0x80;
const HEADER = 1 + 8 + 16;
const MAC = 32;

/**
 * JUPYTERHUB_CRYPT_KEY's keys (";"-separated, each 32 bytes as 64 hex digits or 44 base64 characters, as the
 * established hub reads them), or the problem with them.
 */
export function parseFernetKeys(raw: string): { keys: Buffer[] } | { problem: string } {
  const parts = raw.split(';').map((k) => k.trim()).filter(Boolean);
  if (!parts.length) return { problem: 'no key given' };
  const keys: Buffer[] = [];
  for (const [i, part] of parts.entries()) {
    let key: Buffer | undefined;
    if (/^[0-9a-fA-F]{64}$/.test(part)) key = Buffer.from(part, 'hex');
    else if (part.length === 44 && /^[A-Za-z0-9_\-+/]{43}=$/.test(part)) key = Buffer.from(part.replace(/\+/g, '-').replace(/\//g, '_'), 'base64url');
    if (!key || key.length !== 32) return { problem: `key ${i + 1} of ${parts.length} is not 32 bytes written as 64 hex digits or 44 base64 characters` };
    keys.push(key);
  }
  return { keys };
}

/** The plaintext of a Fernet token under any of `keys` (MultiFernet's order), or null when none opens it. */
export function fernetDecrypt(token: Buffer | string, keys: readonly Buffer[]): Buffer | null {
  const text = (typeof token === 'string' ? token : token.toString('latin1')).trim();
  if (!/^[A-Za-z0-9_\-=]+$/.test(text)) return null;
  const data = Buffer.from(text, 'base64url');
  if (data.length < HEADER + 16 + MAC || data[0] !== VERSION || (data.length - HEADER - MAC) % 16 !== 0) return null;
  const signed = data.subarray(0, data.length - MAC);
  const mac = data.subarray(data.length - MAC);
  for (const key of keys) {
    const expected = createHmac('sha256', key.subarray(0, 16)).update(signed).digest();
    if (!timingSafeEqual(expected, mac)) continue;
    try {
      const decipher = createDecipheriv('aes-128-cbc', key.subarray(16, 32), data.subarray(9, HEADER));
      return Buffer.concat([decipher.update(data.subarray(HEADER, data.length - MAC)), decipher.final()]);
    } catch {
      return null; // authentic but badly padded: not a token this spec made
    }
  }
  return null;
}
