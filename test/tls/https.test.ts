// HTTPS at the front door (Hub.ssl_cert, Hub.ssl_key): a real TLS client sees the versions and suites the public
// port accepts, HSTS, Secure cookies, the plain redirect port, WebSocket through TLS to a server, a certificate
// replaced on disk served to new connections while open ones keep working, and a broken certificate file stopping
// the start with one line naming it.
import test from 'ava';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import WebSocket, { WebSocketServer } from 'ws';
import { freePort, runHubCommand, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { listen } from '../proxy/helpers.js';
import { httpsRequest, makeCa, makeLeaf, replaceFile, servedCertificate, type Leaf, type TestCa } from './certs.js';

let hub: HubUnderTest;
let ca: TestCa;
let first: Leaf;
let second: Leaf;
let files: { dir: string; cert: string; key: string };
let backend: http.Server;
let redirectPort: number;
const PW = 'correct horse';

test.before(async () => {
  ca = makeCa();
  first = makeLeaf(ca, 'first');
  second = makeLeaf(ca, 'second');
  // the hub reads its files from a directory of their own (replaced there later, as certbot would)
  const dir = mkdtempSync(join(tmpdir(), 'hub-certs-'));
  files = { dir, cert: join(dir, 'fullchain.pem'), key: join(dir, 'privkey.pem') };
  copyFileSync(first.cert, files.cert);
  copyFileSync(first.key, files.key);
  // a WebSocket echo server behind the hub, as a service route
  backend = http.createServer((_req, res) => res.end('plain'));
  const wss = new WebSocketServer({ server: backend });
  wss.on('connection', (ws) => ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary })));
  const backendPort = await listen(backend);
  redirectPort = await freePort();
  hub = await startHub({
    config: {
      Hub: {
        ssl_cert: files.cert, ssl_key: files.key, http_redirect_port: redirectPort, authenticator_class: 'dummy', log_level: 'info',
        api_tokens: { 'tls-admin-token-123456': 'boss' }, services: [{ name: 'echo', url: `http://127.0.0.1:${backendPort}` }],
      },
      DummyAuthenticator: { password: PW },
      Authenticator: { admin_users: ['boss'] },
      // two gateways on the port (SO_REUSEPORT): each must pick up a replaced certificate
      Supervisor: { gateways: 2 },
    },
  });
  await waitFor('the echo route', async () => ((await httpsRequest(`${hub.url}/services/echo/`, ca.pem)).status === 200 ? true : undefined));
});

test.after.always(async () => {
  await hub?.stop();
  backend?.closeAllConnections();
  backend?.close();
  if (ca) rmSync(ca.dir, { recursive: true, force: true });
  if (files) rmSync(files.dir, { recursive: true, force: true });
});

/** Connects with exactly one TLS version (and, for TLS 1.2, the given suites); the negotiated version, or the error code. */
function handshake(version: tls.SecureVersion, ciphers?: string): Promise<string> {
  return new Promise((resolve) => {
    // SECLEVEL=0 so that the client itself is willing to offer TLS 1.0/1.1: the refusal must come from the hub
    const s = tls.connect({ host: '127.0.0.1', port: hub.port, ca: ca.pem, servername: 'localhost', minVersion: version, maxVersion: version, ciphers: ciphers ?? 'DEFAULT@SECLEVEL=0' }, () => {
      resolve(`${s.getProtocol()} ${s.getCipher().name}`);
      s.destroy();
    });
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
}

test.serial('https: TLS 1.0 and 1.1 are refused by the hub, 1.2 and 1.3 accepted, TLS 1.2 only with forward-secret AEAD suites', async (t) => {
  t.is(await handshake('TLSv1'), 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION');
  t.is(await handshake('TLSv1.1'), 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION');
  t.regex(await handshake('TLSv1.2'), /^TLSv1\.2 ECDHE-ECDSA-(AES\d+-GCM-SHA\d+|CHACHA20-POLY1305)$/);
  t.regex(await handshake('TLSv1.3'), /^TLSv1\.3 TLS_/);
  // CBC and static-RSA suites are not offered by the hub even when the client asks only for them
  t.is(await handshake('TLSv1.2', 'ECDHE-ECDSA-AES128-SHA:@SECLEVEL=0'), 'ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE');
  t.is(await handshake('TLSv1.2', 'AES128-SHA:@SECLEVEL=0'), 'ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE');
  // and the public port does not speak plain HTTP at all
  await t.throwsAsync(fetch(`http://127.0.0.1:${hub.port}/hub/api`));
});

test.serial('https: the API and pages answer over TLS with HSTS, kept alive; the certificate is the configured chain', async (t) => {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  const api = await httpsRequest(`${hub.url}/hub/api`, ca.pem, { agent });
  t.is(api.status, 200);
  t.is(JSON.parse(api.body).version, '6.1.1');
  t.is(api.headers['strict-transport-security'], 'max-age=31536000');
  const page = await httpsRequest(`${hub.url}/hub/login`, ca.pem, { agent, headers: { Accept: 'text/html' } });
  t.is(page.status, 200);
  t.is(page.headers['strict-transport-security'], 'max-age=31536000');
  agent.destroy();
  const served = await servedCertificate(hub.port, ca.pem);
  t.is(served.subject.CN, 'first');
  t.is(served.issuer.CN, 'Hub Test CA');
  // Hub.public_url is https by default: the supervisor's ready line names it
  const ready = new RegExp(`Hub ready: open https://127\\.0\\.0\\.1:${hub.port}/`);
  t.true(await waitFor('the ready line', async () => (ready.test(hub.logs()) ? true : undefined), 15_000, 100));
  // the plain loopback port for the hub's own processes answers without HSTS (a browser would ignore it there)
  const internal = await fetch(`${hub.internalUrl}/hub/api`);
  t.is(internal.status, 200);
  t.is(internal.headers.get('strict-transport-security'), null);
});

test.serial('https: the redirect port sends plain HTTP to https (301 for GET, 308 keeping the method), path and query kept', async (t) => {
  const ask = (method: string, path: string, host = `localhost:${redirectPort}`) => new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: redirectPort, method, path, headers: { Host: host } }, (res) => { res.resume(); resolve(res); });
    req.on('error', reject);
    req.end();
  });
  const get = await ask('GET', '/hub/login?next=%2Fhub%2Fhome');
  t.is(get.statusCode, 301);
  t.is(get.headers.location, `https://localhost:${hub.port}/hub/login?next=%2Fhub%2Fhome`);
  const post = await ask('POST', '/hub/api/users');
  t.is(post.statusCode, 308);
  t.is(post.headers.location, `https://localhost:${hub.port}/hub/api/users`);
  // a Host that is not a host name is refused, not echoed into a Location
  const odd = await ask('GET', '/', 'evil.example/x@y');
  t.is(odd.statusCode, 400);
  t.is(odd.headers.location, undefined);
  // an unknown ACME challenge is a 404 (none is pending)
  t.is((await ask('GET', '/.well-known/acme-challenge/nothing-here')).statusCode, 404);
});

test.serial('https: login cookies are Secure over HTTPS, and a real login works', async (t) => {
  const form = await httpsRequest(`${hub.url}/hub/login`, ca.pem, { headers: { Accept: 'text/html' } });
  const xsrfCookies = [form.headers['set-cookie'] ?? []].flat();
  t.true(xsrfCookies.length > 0);
  for (const c of xsrfCookies) t.regex(c, /;\s*Secure/i);
  const xsrf = /name="_xsrf" value="([^"]+)"/.exec(form.body)?.[1];
  t.truthy(xsrf);
  const login = await httpsRequest(`${hub.url}/hub/login`, ca.pem, {
    method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded', Cookie: xsrfCookies.map((c) => c.split(';')[0]).join('; ') },
    body: new URLSearchParams({ username: 'alice', password: PW, _xsrf: xsrf! }).toString(),
  });
  t.is(login.status, 302);
  const sessionCookies = [login.headers['set-cookie'] ?? []].flat();
  t.true(sessionCookies.length >= 2);
  for (const c of sessionCookies) t.regex(c, /;\s*Secure/i);
});

/** A wss:// client through the hub to the echo server; resolves once open. */
function openEcho(): Promise<{ ws: WebSocket; roundTrip: (text: string) => Promise<string> }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`wss://127.0.0.1:${hub.port}/services/echo/ws`, { ca: ca.pem, servername: 'localhost' });
    ws.once('error', reject);
    ws.once('open', () => resolve({
      ws,
      roundTrip: (text) => new Promise((res, rej) => {
        ws.once('message', (d) => res(d.toString()));
        ws.once('error', rej);
        ws.send(text);
      }),
    }));
  });
}

test.serial('https: WebSocket through TLS to a server behind the hub', async (t) => {
  const { ws, roundTrip } = await openEcho();
  t.is(await roundTrip('hello over wss'), 'hello over wss');
  const big = 'x'.repeat(300_000);
  t.is(await roundTrip(big), big);
  ws.close();
});

test.serial('https: a replaced certificate is served to new connections without a restart; open connections and WebSockets keep working', async (t) => {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  const before = await httpsRequest(`${hub.url}/hub/api`, ca.pem, { agent });
  t.is(before.status, 200);
  const echo = await openEcho();
  t.is(await echo.roundTrip('before'), 'before');

  // both gateways serve the first certificate before it is replaced (the second may still be starting: it would
  // read the new files at its start and have nothing to reload)
  await waitFor('both gateways listening', async () => ((hub.logs().match(/"event":"gateway\.listening"[^\n]*CN=first/g)?.length ?? 0) >= 2 ? true : undefined), 20_000, 100);
  // key first, then the certificate, each replaced whole
  replaceFile(files.key, second.keyPem);
  replaceFile(files.cert, second.certPem);
  // every gateway: 16 new connections in a row (the kernel spreads them over both) all get the new one
  const served = await waitFor('the new certificate from every gateway', async () => {
    const certs = [];
    for (let i = 0; i < 16; i++) certs.push(await servedCertificate(hub.port, ca.pem));
    return certs.every((c) => c.subject.CN === 'second') ? certs[0] : undefined;
  }, 15_000, 100);
  t.is(served.issuer.CN, 'Hub Test CA');
  // the connection opened before the change is still served (same socket: the agent keeps one)
  const after = await httpsRequest(`${hub.url}/hub/api`, ca.pem, { agent });
  t.is(after.status, 200);
  t.is(Object.keys((agent as unknown as { sockets: object }).sockets).length + Object.keys((agent as unknown as { freeSockets: object }).freeSockets).length, 1);
  t.is(await echo.roundTrip('after'), 'after');
  echo.ws.close();
  agent.destroy();
  // once per gateway: a gateway's line reaches the hub's output through the supervisor's pipe, maybe after the
  // connections above were answered with the new certificate
  await waitFor('a tls.certificate_loaded line from each gateway', async () => ((hub.logs().match(/tls\.certificate_loaded/g)?.length ?? 0) >= 2 ? true : undefined), 10_000, 100);
  t.is(hub.logs().match(/tls\.certificate_loaded/g)?.length, 2);

  // a key that does not match: the last good certificate stays, and the log says why (naming the file)
  replaceFile(files.key, first.keyPem);
  await waitFor('the refusal in the log', async () => (/tls\.reload_failed[^\n]*does not match/.test(hub.logs()) ? true : undefined), 15_000, 100);
  t.is((await servedCertificate(hub.port, ca.pem)).subject.CN, 'second');
  t.is((await httpsRequest(`${hub.url}/hub/api`, ca.pem)).status, 200);
  replaceFile(files.key, second.keyPem);
  t.notRegex(hub.logs(), /BEGIN (EC |)PRIVATE KEY/);
});

test('https: a missing file, a key that is not the certificate\'s, or a half-given pair stops the start with one line naming it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-tls-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const start = async (hubOptions: Record<string, unknown>) => {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({ Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_port: await freePort(), ...hubOptions } }));
    return runHubCommand(['--config', file]);
  };
  const missing = await start({ ssl_cert: join(dir, 'nope.pem'), ssl_key: first.key });
  t.is(missing.code, 2);
  const problem = (r: { stderr: string }) => /^hub: invalid configuration:\n {2}(.*)$/.exec(r.stderr.trim())?.[1];
  t.is(problem(missing), `Hub.ssl_cert: ${join(dir, 'nope.pem')}: no such file`);
  const mismatch = await start({ ssl_cert: first.cert, ssl_key: second.key });
  t.is(mismatch.code, 2);
  t.is(problem(mismatch), `Hub.ssl_key: ${second.key}: this key does not match the certificate in ${first.cert}`);
  const notPem = join(dir, 'garbage.pem');
  writeFileSync(notPem, 'not a certificate\n');
  const garbage = await start({ ssl_cert: notPem, ssl_key: first.key });
  t.is(garbage.code, 2);
  t.is(problem(garbage), `Hub.ssl_cert: ${notPem}: not a PEM certificate`);
  const half = await start({ ssl_cert: first.cert });
  t.is(half.code, 2);
  t.regex(half.stderr, /Hub\.ssl_key: needed with Hub\.ssl_cert/);
  const redirectAlone = await start({ http_redirect_port: 8080 });
  t.is(redirectAlone.code, 2);
  t.regex(redirectAlone.stderr, /Hub\.http_redirect_port: only with HTTPS/);
  const acmeHalf = await start({ letsencrypt_domains: ['hub.example.org'] });
  t.is(acmeHalf.code, 2);
  t.regex(acmeHalf.stderr, /Hub\.letsencrypt_email: needed with Hub\.letsencrypt_domains/);
  t.regex(acmeHalf.stderr, /Hub\.http_redirect_port: needed with Hub\.letsencrypt_domains/);
  const wildcard = await start({ letsencrypt_email: 'a@example.org', letsencrypt_domains: ['*.example.org'], http_redirect_port: 8080 });
  t.is(wildcard.code, 2);
  t.regex(wildcard.stderr, /Hub\.letsencrypt_domains: "\*\.example\.org" is not a DNS name/);
  const both = await start({ ssl_cert: first.cert, ssl_key: first.key, letsencrypt_email: 'a@example.org', letsencrypt_domains: ['hub.example.org'], http_redirect_port: 8080 });
  t.is(both.code, 2);
  t.regex(both.stderr, /Hub\.letsencrypt_domains: not with Hub\.ssl_cert/);
  // a plain port HTTPS adds that something else holds is named before anything starts
  const holder = net.createServer();
  const held = await new Promise<number>((resolve) => holder.listen(0, '127.0.0.1', () => resolve((holder.address() as net.AddressInfo).port)));
  t.teardown(() => holder.close());
  const taken = await start({ ssl_cert: first.cert, ssl_key: first.key, hub_port: held });
  t.is(taken.code, 2);
  t.is(problem(taken), `Hub.hub_port: 127.0.0.1:${held} cannot be listened on (in use by another process, perhaps another hub)`);
  t.notRegex(mismatch.stderr + missing.stderr, /PRIVATE KEY/);
});
