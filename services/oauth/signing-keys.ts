// The keys the hub signs id_tokens with (ES256, jose): generated once into <data_dir>/oidc_signing_keys.json (0600,
// like cookie_secret: a single-user server run as another account cannot read it), newest first: the next key, the
// current one (it signs), the previous one. The JWKS publishes all three: tokens signed before `hub rotate-oidc-key`
// still verify until they expire, and the key a rotation makes current was published one rotation earlier, so a
// relying party's cached JWKS already holds it (openid-client refetches an unknown kid only after 60 s). Only the
// oauth actor and the offline `hub rotate-oidc-key` touch the file; a change of the file (a rotation by another
// replica or by the command line while no hub ran) is picked up at the next use. With Hub.db_url on PostgreSQL the
// keys are a row of the oauth store instead (`KeySource`), so the oauth actors of every node sign and publish the same.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

export const SIGNING_ALG = 'ES256';
export const SIGNING_KEYS_FILE = 'oidc_signing_keys.json';

interface StoredKey { kid: string; created: string; jwk: JWK }
export interface KeyFile { keys: StoredKey[] }

/** Where the keys are kept: the data dir's file, or the shared oauth store. */
export interface KeySource {
  /** changes whenever the keys do; null while none are kept */
  version(): Promise<string | null>;
  read(): Promise<KeyFile | null>;
  /** writes `file` unless another writer changed the keys since `expected` (then false) */
  write(file: KeyFile, expected: string | null): Promise<boolean>;
}

/** What the oauth store offers for its keys (services/oauth/store.ts). */
export interface KeyRow {
  signingKeysVersion(): Promise<string | null>;
  signingKeys(): Promise<string | null>;
  putSigningKeys(json: string, expected: string | null): Promise<boolean>;
}

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

function parseKeys(text: string, where: string): KeyFile {
  const parsed = JSON.parse(text) as KeyFile;
  if (!Array.isArray(parsed.keys) || !parsed.keys.length || parsed.keys.some((k) => typeof k.kid !== 'string' || typeof k.jwk?.d !== 'string')) {
    throw new Error(`${where}: not a key file this hub wrote (remove it to have a new key made)`);
  }
  return parsed;
}

/** The data dir's file (one node, or a copy per node); its modification time is its version. */
export function fileKeySource(dataDir: string): KeySource {
  return {
    version: async () => (existsSync(keysPath(dataDir)) ? String(statSync(keysPath(dataDir)).mtimeMs) : null),
    read: async () => (existsSync(keysPath(dataDir)) ? parseKeys(readFileSync(keysPath(dataDir), 'utf8'), keysPath(dataDir)) : null),
    write: async (file) => {
      writeKeys(dataDir, file);
      return true;
    },
  };
}

/** A row of the oauth store every node shares (Hub.db_url on PostgreSQL): written by compare-and-set on its version. */
export function storeKeySource(store: KeyRow): KeySource {
  return {
    version: () => store.signingKeysVersion(),
    read: async () => {
      const json = await store.signingKeys();
      return json === null ? null : parseKeys(json, 'the oauth store\'s signing keys');
    },
    write: (file, expected) => store.putSigningKeys(JSON.stringify(file), expected),
  };
}

/** Two rotations racing (two nodes, or a node and the command line): each tries again on what the other wrote. */
const WRITE_TRIES = 5;

/** The published next key becomes the current one, the current one the previous; a new next key is made. */
export async function rotateSigningKey(where: string | KeySource): Promise<{ kid: string; previous_kid: string }> {
  const source = typeof where === 'string' ? fileKeySource(where) : where;
  for (let attempt = 1; ; attempt++) {
    const version = await source.version();
    const [next, current] = (await source.read())?.keys ?? [];
    const keys = [await newKey(), next ?? (await newKey()), ...(current ? [current] : [])];
    if (await source.write({ keys }, version)) return { kid: keys[1].kid, previous_kid: current?.kid ?? '' };
    if (attempt >= WRITE_TRIES) throw new Error('the signing keys kept changing under a rotation');
  }
}

const publicOf = ({ d: _private, ...pub }: JWK, kid: string): JWK => ({ ...pub, kid, alg: SIGNING_ALG, use: 'sig' });

export class SigningKeys {
  private file: KeyFile = { keys: [] };
  private version: string | null = null;
  private current: { kid: string; key: CryptoKey } | null = null;

  private constructor(private readonly source: KeySource) {}

  /** The keys of the data dir (a path) or of a shared source, made at first use (by one node when several start). */
  static async open(where: string | KeySource): Promise<SigningKeys> {
    const source = typeof where === 'string' ? fileKeySource(where) : where;
    if ((await source.version()) === null) await source.write({ keys: [await newKey(), await newKey()] }, null);
    const keys = new SigningKeys(source);
    await keys.reload();
    return keys;
  }

  /** One look at the version per use (a stat, or one small query): the keys are re-read only when they changed. */
  private async reload(): Promise<void> {
    const version = await this.source.version();
    if (version === this.version && this.current) return;
    const file = await this.source.read();
    if (!file) throw new Error('the OIDC signing keys are gone');
    const signing = file.keys[1] ?? file.keys[0];
    this.current = { kid: signing.kid, key: (await importJWK(signing.jwk, SIGNING_ALG)) as CryptoKey };
    this.file = file;
    this.version = version;
  }

  async rotate(): Promise<{ kid: string; previous_kid: string }> {
    const out = await rotateSigningKey(this.source);
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
