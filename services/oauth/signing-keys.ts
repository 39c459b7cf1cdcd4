// The keys the hub signs id_tokens with (ES256, jose): generated once into <data_dir>/oidc_signing_keys.json (0600,
// like cookie_secret: a single-user server run as another account cannot read it), newest first, at most two. The
// JWKS publishes both, so tokens signed before `hub rotate-oidc-key` still verify until they expire. Only the oauth
// actor and the offline `hub rotate-oidc-key` touch the file; a change of the file (a rotation by another replica
// or by the command line while no hub ran) is picked up at the next signing.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

export const SIGNING_ALG = 'ES256';
export const SIGNING_KEYS_FILE = 'oidc_signing_keys.json';

interface StoredKey { kid: string; created: string; jwk: JWK }
interface KeyFile { keys: StoredKey[] }

const keysPath = (dataDir: string) => join(dataDir, SIGNING_KEYS_FILE);

async function newKey(): Promise<StoredKey> {
  const { privateKey } = await generateKeyPair(SIGNING_ALG, { extractable: true });
  const jwk = await exportJWK(privateKey);
  return { kid: await calculateJwkThumbprint(jwk), created: new Date().toISOString(), jwk };
}

/** Written whole under a temporary name and renamed: a reader sees the old file or the new one, never half. */
function writeKeys(dataDir: string, file: KeyFile): void {
  const tmp = `${keysPath(dataDir)}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(file)}\n`, { mode: 0o600 });
  renameSync(tmp, keysPath(dataDir));
}

function readKeys(dataDir: string): KeyFile | null {
  if (!existsSync(keysPath(dataDir))) return null;
  const parsed = JSON.parse(readFileSync(keysPath(dataDir), 'utf8')) as KeyFile;
  if (!Array.isArray(parsed.keys) || !parsed.keys.length || parsed.keys.some((k) => typeof k.kid !== 'string' || typeof k.jwk?.d !== 'string')) {
    throw new Error(`${keysPath(dataDir)}: not a key file this hub wrote (remove it to have a new key made)`);
  }
  return parsed;
}

/** A new current key; the old current one becomes the previous (published, no longer used to sign). */
export async function rotateSigningKey(dataDir: string): Promise<{ kid: string; previous_kid: string }> {
  const old = readKeys(dataDir)?.keys[0];
  const fresh = await newKey();
  writeKeys(dataDir, { keys: old ? [fresh, old] : [fresh] });
  return { kid: fresh.kid, previous_kid: old?.kid ?? '' };
}

const publicOf = ({ d: _private, ...pub }: JWK, kid: string): JWK => ({ ...pub, kid, alg: SIGNING_ALG, use: 'sig' });

export class SigningKeys {
  private file: KeyFile = { keys: [] };
  private mtimeMs = -1;
  private current: { kid: string; key: CryptoKey } | null = null;

  private constructor(private readonly dataDir: string) {}

  /** The keys of the data dir, made at first use. */
  static async open(dataDir: string): Promise<SigningKeys> {
    if (!existsSync(keysPath(dataDir))) writeKeys(dataDir, { keys: [await newKey()] });
    const keys = new SigningKeys(dataDir);
    await keys.reload();
    return keys;
  }

  /** One stat per use: the file is re-read only when it changed. */
  private async reload(): Promise<void> {
    const mtimeMs = statSync(keysPath(this.dataDir)).mtimeMs;
    if (mtimeMs === this.mtimeMs && this.current) return;
    const file = readKeys(this.dataDir);
    if (!file) throw new Error(`${keysPath(this.dataDir)} is gone`);
    const [first] = file.keys;
    this.current = { kid: first.kid, key: (await importJWK(first.jwk, SIGNING_ALG)) as CryptoKey };
    this.file = file;
    this.mtimeMs = mtimeMs;
  }

  async rotate(): Promise<{ kid: string; previous_kid: string }> {
    const out = await rotateSigningKey(this.dataDir);
    await this.reload();
    return out;
  }

  /** The public keys, current first. */
  async jwks(): Promise<{ keys: JWK[] }> {
    await this.reload();
    return { keys: this.file.keys.map((k) => publicOf(k.jwk, k.kid)) };
  }

  async sign(claims: JWTPayload): Promise<string> {
    await this.reload();
    const { kid, key } = this.current!;
    return new SignJWT(claims).setProtectedHeader({ alg: SIGNING_ALG, kid, typ: 'JWT' }).sign(key);
  }
}
