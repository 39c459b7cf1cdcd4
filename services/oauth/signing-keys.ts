// The keys the hub signs id_tokens with (ES256, jose): generated once into <data_dir>/oidc_signing_keys.json (0600,
// like cookie_secret: a single-user server run as another account cannot read it), newest first: the next key, the
// current one (it signs), the previous one. The JWKS publishes all three: tokens signed before `hub rotate-oidc-key`
// still verify until they expire, and the key a rotation makes current was published one rotation earlier, so a
// relying party's cached JWKS already holds it (openid-client refetches an unknown kid only after 60 s). Only the
// oauth actor and the offline `hub rotate-oidc-key` touch the file; a change of the file (a rotation by another
// replica or by the command line while no hub ran) is picked up at the next use.
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

/** The published next key becomes the current one, the current one the previous; a new next key is made. */
export async function rotateSigningKey(dataDir: string): Promise<{ kid: string; previous_kid: string }> {
  const [next, current] = readKeys(dataDir)?.keys ?? [];
  const keys = [await newKey(), next ?? (await newKey()), ...(current ? [current] : [])];
  writeKeys(dataDir, { keys });
  return { kid: keys[1].kid, previous_kid: current?.kid ?? '' };
}

const publicOf = ({ d: _private, ...pub }: JWK, kid: string): JWK => ({ ...pub, kid, alg: SIGNING_ALG, use: 'sig' });

export class SigningKeys {
  private file: KeyFile = { keys: [] };
  private mtimeMs = -1;
  private current: { kid: string; key: CryptoKey } | null = null;

  private constructor(private readonly dataDir: string) {}

  /** The keys of the data dir, made at first use. */
  static async open(dataDir: string): Promise<SigningKeys> {
    if (!existsSync(keysPath(dataDir))) writeKeys(dataDir, { keys: [await newKey(), await newKey()] });
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
    const signing = file.keys[1] ?? file.keys[0];
    this.current = { kid: signing.kid, key: (await importJWK(signing.jwk, SIGNING_ALG)) as CryptoKey };
    this.file = file;
    this.mtimeMs = mtimeMs;
  }

  async rotate(): Promise<{ kid: string; previous_kid: string }> {
    const out = await rotateSigningKey(this.dataDir);
    await this.reload();
    return out;
  }

  /** The public keys: next, current, previous. */
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
