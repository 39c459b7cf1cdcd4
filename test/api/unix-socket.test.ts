// Hub.bind_url as a unix socket (the established hub's JupyterHub.bind_url = "http+unix://%2F…"): the gateway
// listens on the socket instead of Hub.ip:Hub.port, with the mode Hub.hub_socket_mode gives it; the API, the pages
// and the proxy answer over it; the hub's own processes use the loopback Hub.hub_port. A stale socket left by a
// killed process is replaced; the socket is gone after the hub stops. Bad addresses stop the start with one line.
import test from 'ava';
import { createServer, request, type Server } from 'node:http';
import { existsSync, lstatSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, runCommand, runHubCommand, startHub, type HubUnderTest } from '../harness.js';
import { randomToken } from './client.js';

const ADMIN = randomToken();
const socketDir = mkdtempSync(join(tmpdir(), 'hub-sock-'));
const socketPath = join(socketDir, 'hub.sock');
let hub: HubUnderTest;
let service: Server;

/** One request over the hub's unix socket: status, headers and body. */
function overSocket(method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, headers: { host: 'hub.example.org', ...headers }, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer over ${socketPath}`)));
    req.on('error', reject);
    req.end();
  });
}

test.before(async () => {
  // a stale socket, as a killed hub leaves it: a process listening on it and killed before it can remove it
  const stale = await runCommand(process.execPath, ['-e', `require('node:net').createServer().listen(${JSON.stringify(socketPath)}, () => process.kill(process.pid, 'SIGKILL'))`], { env: process.env });
  if (stale.code !== null || !lstatSync(socketPath).isSocket()) throw new Error(`setup: no stale socket at ${socketPath} (${stale.code}, ${stale.stderr})`);
  // an external service: the gateway's proxy forwards /services/echo/… to it
  service = createServer((req, res) => res.end(`echo saw ${req.url}`));
  const servicePort = await freePort();
  await new Promise<void>((r) => service.listen(servicePort, '127.0.0.1', r));
  hub = await startHub({
    config: {
      Hub: {
        bind_url: `http+unix://${encodeURIComponent(socketPath)}`, hub_socket_mode: '0660',
        authenticator_class: 'dummy', api_tokens: { [ADMIN]: 'boss' },
        services: [{ name: 'echo', url: `http://127.0.0.1:${servicePort}` }],
      },
      Authenticator: { admin_users: ['boss'] },
    },
  });
});

test.after.always(async () => {
  await hub?.stop();
  await new Promise((r) => (service ? service.close(r) : r(undefined)));
  rmSync(socketDir, { recursive: true, force: true });
});

test.serial('bind_url: the API answers over the unix socket, and the socket has Hub.hub_socket_mode', async (t) => {
  t.true(lstatSync(socketPath).isSocket());
  t.is((statSync(socketPath).mode & 0o777).toString(8), '660');
  const root = await overSocket('GET', '/hub/api');
  t.is(root.status, 200);
  t.regex(JSON.parse(root.body).version, /^\d+\.\d+/);
  const users = await overSocket('GET', '/hub/api/users', { authorization: `token ${ADMIN}` });
  t.is(users.status, 200);
  t.true((JSON.parse(users.body) as { name: string }[]).some((u) => u.name === 'boss'));
  const anonymous = await overSocket('GET', '/hub/api/users');
  t.is(anonymous.status, 403);
  // the hub's own processes reach it on the loopback Hub.hub_port, nowhere on Hub.port
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200);
  await t.throwsAsync(fetch(`http://127.0.0.1:${hub.port}/hub/health`));
});

test.serial('bind_url: the login page renders over the unix socket', async (t) => {
  const page = await overSocket('GET', '/hub/login');
  t.is(page.status, 200);
  t.regex(String(page.headers['content-type']), /text\/html/);
  t.regex(page.body, /<form[^>]*method="post"/i);
  t.regex(page.body, /name="username"/);
});

test.serial('bind_url: a request for a service is proxied to it over the unix socket', async (t) => {
  const r = await overSocket('GET', '/services/echo/hello?x=1');
  t.is(r.status, 200);
  t.is(r.body, 'echo saw /services/echo/hello?x=1');
});

test.serial('bind_url: the socket is removed when the hub stops', async (t) => {
  const stopped = await hub.stop({ keepDataDir: true });
  t.deepEqual(stopped.leftovers, []);
  t.false(existsSync(socketPath));
  rmSync(hub.dataDir, { recursive: true, force: true });
});

test('bind_url: a relative path, a missing directory, an address, several gateways or HTTPS stop the start with one line each', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-sock-cfg-'));
  try {
    const start = async (hubConfig: Record<string, unknown>, more: Record<string, unknown> = {}) => {
      const file = join(dir, 'hub.json');
      writeFileSync(file, JSON.stringify({ Hub: { data_dir: join(dir, 'data'), ...hubConfig }, ...more }));
      return runHubCommand(['--config', file]);
    };
    const relative = await start({ bind_url: 'http+unix://hub.sock' });
    t.is(relative.code, 2);
    t.regex(relative.stderr, /Hub\.bind_url: the socket's path "hub\.sock" must be absolute/);
    const missing = await start({ bind_url: `unix+http://${encodeURIComponent(join(dir, 'nowhere', 'hub.sock'))}` });
    t.is(missing.code, 2);
    t.regex(missing.stderr, /Hub\.bind_url: the socket's directory .*nowhere does not exist/);
    const notSocket = join(dir, 'a-file');
    writeFileSync(notSocket, 'keep me');
    const file = await start({ bind_url: `http+unix://${encodeURIComponent(notSocket)}` });
    t.is(file.code, 2);
    t.regex(file.stderr, /Hub\.bind_url: .*a-file exists and is not a socket/);
    t.true(existsSync(notSocket));
    const tcp = await start({ bind_url: 'http://127.0.0.1:8000/' });
    t.is(tcp.code, 2);
    t.regex(tcp.stderr, /Hub\.bind_url: "http:\/\/127\.0\.0\.1:8000\/": only a unix socket is accepted here/);
    const gateways = await start({ bind_url: `http+unix://${encodeURIComponent(join(dir, 'hub.sock'))}` }, { Supervisor: { gateways: 2 } });
    t.is(gateways.code, 2);
    t.regex(gateways.stderr, /Hub\.bind_url: a unix socket has one listener: Supervisor\.gateways must be 1/);
    const https = await start({ bind_url: `http+unix://${encodeURIComponent(join(dir, 'hub.sock'))}`, ssl_cert: join(dir, 'hub.crt'), ssl_key: join(dir, 'hub.key') });
    t.is(https.code, 2);
    t.regex(https.stderr, /Hub\.bind_url: a unix socket speaks plain HTTP: not with Hub\.ssl_cert/);
    const mode = await start({ bind_url: `http+unix://${encodeURIComponent(join(dir, 'hub.sock'))}`, hub_socket_mode: 'rw-rw----' });
    t.is(mode.code, 2);
    t.regex(mode.stderr, /Hub\.hub_socket_mode: "rw-rw----" is not an octal file mode/);
    t.false(existsSync(join(dir, 'hub.sock')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bind_url: hub import-config carries the established hub\'s unix-socket bind_url (its path as base_url) and hub_socket_mode', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-sock-import-'));
  try {
    const source = join(dir, 'jupyterhub_config.py');
    writeFileSync(source, ['c = get_config()  # noqa', 'c.JupyterHub.bind_url = "unix+http://%2Fsrv%2Fhub%2Fhub.sock/jupyter/"', 'c.JupyterHub.hub_socket_mode = 0o660', ''].join('\n'));
    const r = await runHubCommand(['import-config', source, '--out', join(dir, 'hub.json'), '--json', '--force']);
    t.is(r.code, 0, r.stderr);
    const { config } = JSON.parse(r.stdout) as { config: { Hub: Record<string, unknown> } };
    t.is(config.Hub.bind_url, 'unix+http://%2Fsrv%2Fhub%2Fhub.sock/jupyter/');
    t.is(config.Hub.base_url, '/jupyter/');
    t.is(config.Hub.hub_socket_mode, '0660');
    t.is(config.Hub.ip, undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
