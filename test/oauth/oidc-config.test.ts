// Hub.oauth_clients and Hub.oidc_issuer as the configuration check reads them (every problem named), and
// `hub rotate-oidc-key` with no hub running: it rotates the key file in the data dir itself (0600, next key
// published one rotation ahead, at most three keys).
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ConfigError, oidcIssuer, validateConfig } from '../../shared/config.js';
import { runHubCommand } from '../harness.js';

test('oidc config: Hub.oauth_clients problems are each named', (t) => {
  const err = t.throws(() => validateConfig({
    Hub: {
      services: [{ name: 'grafana', api_token: 'a-long-service-token' }],
      oidc_issuer: 'hub.example.org',
      oauth_clients: [
        { client_id: 'grafana', client_secret: 'short', redirect_uris: ['https://grafana.example.org/login/generic_oauth'] },
        { client_id: 'wiki', redirect_uris: ['/relative', 'https://wiki.example.org/cb#frag'], colour: 'blue' },
        { client_id: 'service-x', redirect_uris: [] },
        { client_id: 'wiki', redirect_uris: ['https://wiki.example.org/cb'], allowed_scopes: ['no-such-scope'] },
      ],
    },
  }), { instanceOf: ConfigError });
  const problems = err!.problems.join('\n');
  for (const expected of [
    'Hub.oidc_issuer: expected an http(s) URL',
    'Hub.oauth_clients "grafana".client_secret: at least 16 characters',
    'Hub.oauth_clients "wiki".redirect_uris: "/relative" is not an absolute http(s) URI',
    'Hub.oauth_clients "wiki".redirect_uris: "https://wiki.example.org/cb#frag" is not an absolute http(s) URI',
    'Hub.oauth_clients "wiki".colour: unknown option',
    'Hub.oauth_clients "service-x".client_id: "service-" and "hub-user-" name the hub\'s own clients',
    'Hub.oauth_clients "service-x".redirect_uris: at least one redirect URI',
    'Hub.oauth_clients "wiki": defined twice',
    'Hub.oauth_clients "wiki".allowed_scopes: "no-such-scope"',
  ]) t.true(problems.includes(expected), `${expected}\nin:\n${problems}`);
  // checked once each option is right on its own: a tool named like a service would share its access scope
  const clash = t.throws(() => validateConfig({
    Hub: {
      services: [{ name: 'grafana', api_token: 'a-long-service-token' }],
      oauth_clients: [{ client_id: 'grafana', client_secret: 'a-secret-of-16-chars', redirect_uris: ['https://grafana.example.org/login/generic_oauth'] }],
    },
  }), { instanceOf: ConfigError });
  t.regex(clash!.problems.join('\n'), /Hub\.oauth_clients "grafana": a service has this name/);
});

test('oidc config: the issuer is the public URL + /hub unless configured', (t) => {
  t.is(oidcIssuer(validateConfig({ Hub: { public_url: 'https://hub.example.org/' } })), 'https://hub.example.org/hub');
  t.is(oidcIssuer(validateConfig({ Hub: { port: 8123 } })), 'http://127.0.0.1:8123/hub');
  t.is(oidcIssuer(validateConfig({ Hub: { public_url: 'https://hub.example.org', oidc_issuer: 'https://login.example.org/' } })), 'https://login.example.org');
  const ok = validateConfig({ Hub: { oauth_clients: [{ client_id: 'grafana', client_secret: 'a-secret-of-16-chars', redirect_uris: ['https://grafana.example.org/login/generic_oauth'] }] } });
  t.is(ok.Hub.oauth_clients.length, 1);
});

test('oidc config: hub rotate-oidc-key with no hub running rotates the key file itself', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-oidc-keys-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const configFile = join(dir, 'hub.json');
  writeFileSync(configFile, JSON.stringify({ Hub: { data_dir: dir } }));
  const kids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const r = await runHubCommand(['rotate-oidc-key', '--config', configFile]);
    t.is(r.code, 0, r.stderr);
    t.regex(r.stderr, /no hub is running/);
    kids.push(/signing with key (\S+)/.exec(r.stdout)![1]);
  }
  t.is(new Set(kids).size, 3, 'each rotation signs with another key');
  const file = join(dir, 'oidc_signing_keys.json');
  t.is(statSync(file).mode & 0o777, 0o600);
  const stored = (JSON.parse(readFileSync(file, 'utf8')) as { keys: { kid: string }[] }).keys.map((k) => k.kid);
  t.is(stored.length, 3, 'the next, the current and the previous key; older ones are dropped');
  t.is(stored[1], kids[2], 'the current key');
  t.is(stored[2], kids[1], 'the previous key');
  t.false(stored.includes(kids[0]));
});

test('oidc config: hub --help lists rotate-oidc-key', async (t) => {
  const r = await runHubCommand(['--help']);
  t.is(r.code, 0);
  t.regex(r.stdout, /^ {2}rotate-oidc-key +sign id_tokens with a new OpenID Connect key/m);
});
