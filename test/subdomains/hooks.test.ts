// How names become host labels with Hub.subdomain_hook, checked against the established hub 6.1.1's own hooks
// (jupyterhub.utils.subdomain_hook_idna / subdomain_hook_legacy, run by the venv's python that
// `scripts/setup.mjs --for-tests` makes): the same host for every name, users and services.
import test from 'ava';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { REPO, runCommand } from '../harness.js';
import { browserLocation, hostnameOf, subdomainOf, subdomainsOf } from '../../shared/subdomains.js';
import { validateConfig } from '../../shared/config.js';

const PYTHON = join(REPO, '.cache', 'jupyter-6.1', 'bin', 'python');

/** Plain, capitalised, Unicode (Latin, Greek, Cyrillic, CJK, Hebrew, Arabic, Devanagari), mixed scripts, symbols, emoji, punctuation, long, numeric. */
const NAMES = [
  'alice', 'bob', 'Alice', 'a', '7', '123', 'x1', 'user-1', '-lead', 'trail-', 'two--dashes', 'a_b', 'a.b', 'a~b', 'a b', 'a@example.org',
  "o'brien", 'per%cent', 'ünïcode', 'müller', 'ÜBER', 'straße', 'ελληνικά', 'ς', 'кириллица', '中文名', 'にほんご', '한국어', 'שלום', 'مرحبا',
  'שלוםabc', 'abcשלום', 'हिन्दी', 'a\u0301', '\u0301a', 'émile-zola', '☃', '😀', 'ﬁ', 'ａｂｃ', 'x'.repeat(63), 'x'.repeat(64), 'é'.repeat(40),
  'ab\u200dcd', 'ab\u00adcd', 'l·l', 'a·b', 'ͳ͵ͳ', 'א׳', 'カ・カ', '٠١', '٠۱', 'a/b', 'a+b', 'café.bar', 'ǅ', 'ǆ',
];
// Left out on purpose: names with U+0130 İ, U+0131 ı, U+017F ſ or U+212A K, which Python's case-insensitive [a-z] takes
// for ASCII letters, so the established hub makes a host that is no DNS name of them ('ıx.hub.example.org'); this hub
// gives them the hash form (README, Hub.subdomain_hook).

test('subdomain hooks: every name, as a user and as a service, gets the established hub 6.1.1\'s host (idna and legacy)', async (t) => {
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run \`node scripts/setup.mjs --for-tests\` (it makes the jupyterhub 6.1.1 venv)`);
  const script = `import json, sys
from jupyterhub.utils import subdomain_hook_idna, subdomain_hook_legacy
names = json.load(sys.stdin)
print(json.dumps([[h(n, 'hub.example.org', k) for n in names] for h in (subdomain_hook_idna, subdomain_hook_legacy) for k in ('user', 'service')]))`;
  const r = await runCommand(PYTHON, ['-c', script], { env: { PATH: process.env.PATH }, input: JSON.stringify(NAMES) });
  t.is(r.code, 0, r.stderr);
  const [idnaUser, idnaService, legacyUser, legacyService] = JSON.parse(r.stdout) as string[][];
  NAMES.forEach((name, i) => {
    t.is(subdomainOf('idna', name, 'hub.example.org', 'user'), idnaUser[i], `idna user ${JSON.stringify(name)}`);
    t.is(subdomainOf('idna', name, 'hub.example.org', 'service'), idnaService[i], `idna service ${JSON.stringify(name)}`);
    t.is(subdomainOf('legacy', name, 'hub.example.org', 'user'), legacyUser[i], `legacy user ${JSON.stringify(name)}`);
    t.is(subdomainOf('legacy', name, 'hub.example.org', 'service'), legacyService[i], `legacy service ${JSON.stringify(name)}`);
  });
});

test('subdomains: hosts and URLs from Hub.subdomain_host; Host headers as names; hub paths to a user\'s host', (t) => {
  t.is(subdomainsOf(validateConfig({})), null, 'off by default');
  const sub = subdomainsOf(validateConfig({ Hub: { subdomain_host: 'https://Hub.Example.org:8443' } }))!;
  t.is(sub.hubOrigin, 'https://hub.example.org:8443');
  t.is(sub.userOrigin('alice'), 'https://alice.hub.example.org:8443');
  t.is(sub.serviceOrigin('whoami'), 'https://whoami--service.hub.example.org:8443');
  t.true(sub.isUnder('alice.hub.example.org'));
  t.false(sub.isUnder('hub.example.org'));
  t.false(sub.isUnder('evilhub.example.org'));
  t.is(hostnameOf('Alice.Hub.Example.org.:8443'), 'alice.hub.example.org');
  t.is(hostnameOf('[::1]:80'), '[::1]');
  t.is(browserLocation(sub, '/user/alice/lab?x=1'), 'https://alice.hub.example.org:8443/user/alice/lab?x=1');
  t.is(browserLocation(sub, '/user/o%27brien/'), `https://${subdomainOf('idna', "o'brien", 'hub.example.org', 'user')}:8443/user/o%27brien/`);
  t.is(browserLocation(sub, '/hub/home'), '/hub/home');
  t.is(browserLocation(null, '/user/alice/'), '/user/alice/');
});

test('subdomains: Hub.subdomain_host is checked at start, with the reason', (t) => {
  for (const [value, why] of [
    ['hub.example.org', /not a URL/], ['ftp://hub.example.org', /https:\/\//], ['https://hub.example.org/jupyter/', /only scheme, host and port/],
    ['https://10.0.0.1', /not an address/], ['https://localhost', /not an address or a bare name/],
  ] as const) {
    const e = t.throws(() => validateConfig({ Hub: { subdomain_host: value } }), undefined, value);
    t.regex(e!.message, why, value);
  }
  t.throws(() => validateConfig({ Hub: { subdomain_hook: '{username}' } }), { message: /subdomain_hook/ });
  t.throws(() => validateConfig({ Hub: { subdomain_host: 'https://hub.example.org', public_url: 'https://other.example.org/' } }), { message: /must be at the host of Hub.subdomain_host/ });
  t.notThrows(() => validateConfig({ Hub: { subdomain_host: 'https://hub.example.org', public_url: 'https://hub.example.org/' } }));
});
