// The established hub's secrets at rest, made by its own code (jupyterhub 6.1.1 and cryptography in the test venv)
// and read by this hub's: a token hash from its `hash_token` (1 round as for tokens it generates, 16,384 as for tokens
// given to it) verifies with shared/secrets.ts, and only for that token; auth state it encrypts with a MultiFernet of
// JUPYTERHUB_CRYPT_KEY's keys (hex or base64, the first encrypting) opens with shared/fernet.ts, also after a
// rotation, and not with another key.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { verifySecret } from '../../shared/secrets.js';
import { fernetDecrypt, parseFernetKeys } from '../../shared/fernet.js';
import { VENV_PYTHON } from './jupyterhub-fixture.js';

function python(code: string, ...args: string[]): string {
  if (!existsSync(VENV_PYTHON)) throw new Error(`${VENV_PYTHON} is missing: run \`node scripts/setup.mjs --for-tests\``);
  const r = spawnSync(VENV_PYTHON, ['-c', code, ...args], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`the established hub's code failed: ${r.stderr}`);
  return r.stdout.trim();
}

test('formats: token hashes from the established hub\'s hash_token verify here, for that token only', (t) => {
  const token = randomBytes(16).toString('hex');
  const [generated, given] = python(
    'import sys\nfrom jupyterhub.utils import hash_token\nprint(hash_token(sys.argv[1], rounds=1))\nprint(hash_token(sys.argv[1]))', token,
  ).split('\n');
  t.regex(generated, /^sha512:1:[0-9a-f]{16}:[0-9a-f]{128}$/);
  t.regex(given, /^sha512:16384:[0-9a-f]{16}:[0-9a-f]{128}$/);
  for (const hashed of [generated, given]) {
    t.true(verifySecret(token, hashed));
    t.false(verifySecret(token.slice(0, -1) + (token.endsWith('a') ? 'b' : 'a'), hashed));
    t.false(verifySecret(token.toUpperCase(), hashed));
  }
});

test('formats: auth state the established hub encrypted (MultiFernet, hex and base64 keys) opens here, also after a rotation', (t) => {
  const [oldKey, newKey, otherKey] = [randomBytes(32), randomBytes(32), randomBytes(32)];
  const state = { access_token: 'at-1', nested: { n: 7 }, text: 'é ✓' };
  // as its CryptKeeper does: MultiFernet over the raw 32-byte keys, the first encrypting
  const sealed = python([
    'import sys, json, base64',
    'from cryptography.fernet import Fernet, MultiFernet',
    'keys = [bytes.fromhex(k) for k in sys.argv[1].split(";")]',
    'f = MultiFernet([Fernet(base64.urlsafe_b64encode(k)) for k in keys])',
    'print(f.encrypt(json.dumps(json.loads(sys.argv[2])).encode("utf8")).decode("ascii"))',
  ].join('\n'), oldKey.toString('hex'), JSON.stringify(state));
  const open = (keys: string) => {
    const parsed = parseFernetKeys(keys);
    if ('problem' in parsed) throw new Error(parsed.problem);
    const plain = fernetDecrypt(Buffer.from(sealed, 'ascii'), parsed.keys);
    return plain ? JSON.parse(plain.toString('utf8')) : null;
  };
  t.deepEqual(open(oldKey.toString('hex')), state);
  t.deepEqual(open(`${newKey.toString('hex')};${oldKey.toString('base64')}`), state, 'the old key second, in base64');
  t.deepEqual(open(`${newKey.toString('base64url').padEnd(44, '=')};${oldKey.toString('hex')}`), state);
  t.is(open(otherKey.toString('hex')), null);
  const changed = `${sealed.slice(0, 40)}${sealed[40] === 'A' ? 'B' : 'A'}${sealed.slice(41)}`;
  t.is(fernetDecrypt(Buffer.from(changed), [oldKey]), null, 'a changed byte fails its HMAC');
  t.deepEqual(parseFernetKeys('abc'), { problem: 'key 1 of 1 is not 32 bytes written as 64 hex digits or 44 base64 characters' });
});
