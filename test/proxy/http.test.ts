// The gateway forwarding HTTP to services: methods, headers, streaming both ways with flat memory,
// SSE timing, aborts and crashes, unreachable targets, path escapes, activity, and /hub/api/proxy.
import test from 'ava';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { connect as natsConnect, type NatsConnection } from 'nats';
import { freePort, NATS_ADMIN, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { download, listen, peakRss, rawRequest, rssMb, sha256OfRepeated, upload, writeBlocks } from './helpers.js';

let hub: HubUnderTest;
let api: ApiCall;
let nc: NatsConnection;
const ADMIN = randomToken();
const PLEB = randomToken();
const BIG_MB = 200;

/** Every path each backend was asked for, to prove nothing reached a backend outside its prefix. */
const seen: Record<string, string[]> = { echo: [], secret: [] };
let slowClosed: () => void = () => undefined;
let uploadAborted: () => void = () => undefined;

function echoBackend(): http.Server {
  return http.createServer((req, res) => {
    seen.echo.push(req.url!);
    const path = req.url!.replace(/^\/services\/echo/, '').split('?')[0];
    switch (path) {
      case '/sink': {
        const h = createHash('sha256');
        let bytes = 0;
        req.on('data', (c: Buffer) => { bytes += c.length; h.update(c); });
        req.on('end', () => res.end(JSON.stringify({ bytes, sha256: h.digest('hex') })));
        req.on('aborted', () => uploadAborted());
        return;
      }
      case '/download':
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(BIG_MB * 1024 * 1024) });
        return writeBlocks(res, BIG_MB);
      case '/download-chunked':
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        return writeBlocks(res, BIG_MB);
      case '/sse': {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        let n = 0;
        const timer = setInterval(() => {
          res.write(`data: ${JSON.stringify({ n, sent: Date.now() })}\n\n`);
          if (++n === 5) {
            clearInterval(timer);
            res.end();
          }
        }, 200);
        return;
      }
      case '/slow': {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        const timer = setInterval(() => res.write(Buffer.alloc(16 * 1024, 1)), 50);
        res.on('close', () => { clearInterval(timer); slowClosed(); });
        return;
      }
      case '/crash':
        res.writeHead(200, { 'content-length': String(1024 * 1024) });
        res.write(Buffer.alloc(64 * 1024, 2), () => setTimeout(() => req.socket.destroy(), 50));
        return;
      case '/crash-chunked':
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write(Buffer.alloc(64 * 1024, 3), () => setTimeout(() => req.socket.destroy(), 50));
        return;
      case '/headers':
        res.writeHead(200, [
          ['Set-Cookie', 'a=1; Path=/'], ['Set-Cookie', 'b=2; Path=/'], ['Connection', 'X-Resp-Drop'], ['X-Resp-Drop', 'yes'],
          ['Keep-Alive', 'timeout=5'], ['X-Kept', 'yes'], ['Content-Type', 'application/json'],
        ].flat() as unknown as http.OutgoingHttpHeaders);
        res.end(JSON.stringify({ headers: req.headers, url: req.url }));
        return;
      case '/empty':
        res.writeHead(204).end();
        return;
      default: {
        const chunks: Buffer[] = [];
        req.on('data', (c) => chunks.push(c));
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json', 'x-method': req.method! });
          res.end(req.method === 'HEAD' ? undefined : JSON.stringify({ method: req.method, url: req.url, body: Buffer.concat(chunks).toString() }));
        });
      }
    }
  });
}

const backends: http.Server[] = [];

test.before(async () => {
  const echo = echoBackend();
  const secret = http.createServer((req, res) => { seen.secret.push(req.url!); res.end('secret'); });
  backends.push(echo, secret);
  const [echoPort, secretPort, downPort] = [await listen(echo), await listen(secret), await freePort()];
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss', [PLEB]: 'pleb' },
        activity_resolution: 1,
        services: [
          { name: 'echo', url: `http://127.0.0.1:${echoPort}` },
          { name: 'secret', url: `http://127.0.0.1:${secretPort}` },
          { name: 'down', url: `http://127.0.0.1:${downPort}` },
          { name: 'nourl' },
        ],
      },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
  nc = await natsConnect({ servers: hub.natsUrl, ...NATS_ADMIN });
  await waitFor('the echo route', async () => ((await fetch(`${hub.url}/services/echo/`)).status === 200 ? true : undefined));
});
test.after.always(async () => {
  await nc?.close();
  await hub?.stop();
  for (const b of backends) b.closeAllConnections(), b.close();
});

const gatewayPid = () => hub.children().gateway!;

test('proxy: every method reaches the service with its body, query and full path', async (t) => {
  // uWebSockets.js 20.30 only parses the standard methods: WebDAV's (PROPFIND, ...) are refused at the door.
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const body = ['GET', 'OPTIONS'].includes(method) ? undefined : Buffer.from(`body of ${method}`);
    const r = await rawRequest(hub.port, method, '/services/echo/some/where?x=1&y=%20', body ? { 'content-length': String(body.length) } : {}, body);
    t.is(r.status, 200, method);
    t.deepEqual(JSON.parse(r.body.toString()), { method, url: '/services/echo/some/where?x=1&y=%20', body: body?.toString() ?? '' }, method);
  }
  const head = await rawRequest(hub.port, 'HEAD', '/services/echo/x');
  t.is(head.status, 200);
  t.is(head.headers['x-method'], 'HEAD');
  t.is(head.body.length, 0);
  const empty = await rawRequest(hub.port, 'GET', '/services/echo/empty');
  t.is(empty.status, 204);
  t.is(empty.body.length, 0);
});

test('proxy: a chunked request body is forwarded whole', async (t) => {
  const r = await new Promise<string>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: hub.port, method: 'POST', path: '/services/echo/chunked', agent: false }, (res) => {
      let d = '';
      res.on('data', (c) => { d += c; });
      res.on('end', () => resolve(d));
    });
    req.on('error', reject);
    req.write('first,');
    setTimeout(() => req.end('second'), 50);
  });
  t.is(JSON.parse(r).body, 'first,second');
});

test('proxy: forwarding headers are appended, hop-by-hop headers dropped both ways, Host kept', async (t) => {
  const r = await rawRequest(hub.port, 'GET', '/services/echo/headers', {
    host: 'hub.example:8000', connection: 'keep-alive, X-Drop-Me', 'x-drop-me': '1', 'keep-alive': 'timeout=5', te: 'trailers',
    'proxy-authorization': 'Basic eA==', 'x-forwarded-for': '10.1.2.3', 'x-forwarded-proto': 'https', 'x-custom': 'kept',
  });
  t.is(r.status, 200);
  const { headers } = JSON.parse(r.body.toString());
  t.is(headers.host, 'hub.example:8000');
  t.is(headers['x-forwarded-for'], '10.1.2.3, 127.0.0.1');
  t.is(headers['x-forwarded-proto'], 'https,http', 'the value the gateway adds is the last');
  t.is(headers['x-forwarded-host'], 'hub.example:8000');
  t.is(headers['x-custom'], 'kept');
  for (const h of ['x-drop-me', 'keep-alive', 'te', 'proxy-authorization']) t.false(h in headers, h);
  t.deepEqual(r.headers['set-cookie'], ['a=1; Path=/', 'b=2; Path=/']);
  t.is(r.headers['x-kept'], 'yes');
  t.false('x-resp-drop' in r.headers);
  t.false('keep-alive' in r.headers);
  t.is(r.rawHeaders.filter((h) => h.toLowerCase() === 'date').length, 1, 'one Date header');
});

/** Past warm-up (the heap grows once to its working size), a body of any size must not move the gateway's RSS. */
/** well under the 200 MB that passes: holding a body whole would show; heap and socket-buffer noise under load does not */
const FLAT_MB = 64;

test.serial(`proxy: a ${BIG_MB} MB upload streams through with flat gateway memory`, async (t) => {
  t.is((await upload(hub.port, '/services/echo/sink', 64)).status, 200, 'warm-up');
  const before = rssMb(gatewayPid());
  const { peak, result } = await peakRss(gatewayPid(), () => upload(hub.port, '/services/echo/sink', BIG_MB));
  t.is(result.status, 200);
  t.deepEqual(JSON.parse(result.body.toString()), { bytes: BIG_MB * 1024 * 1024, sha256: sha256OfRepeated(BIG_MB) });
  t.log(`gateway RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} MB`);
  t.true(peak - before < FLAT_MB, `gateway RSS grew by ${(peak - before).toFixed(0)} MB`);
});

test.serial(`proxy: a ${BIG_MB} MB download streams through with flat gateway memory, declared length and chunked`, async (t) => {
  for (const path of ['/services/echo/download', '/services/echo/download-chunked']) {
    const before = rssMb(gatewayPid());
    const { peak, result } = await peakRss(gatewayPid(), () => download(hub.port, path));
    t.is(result.status, 200);
    t.is(result.bytes, BIG_MB * 1024 * 1024, path);
    t.is(result.sha256, sha256OfRepeated(BIG_MB), path);
    t.log(`${path}: gateway RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} MB`);
    t.true(peak - before < FLAT_MB, `${path}: gateway RSS grew by ${(peak - before).toFixed(0)} MB`);
  }
});

test('proxy: server-sent events pass through unbuffered, each as it is sent', async (t) => {
  const r = await fetch(`${hub.url}/services/echo/sse`, { headers: { accept: 'text/event-stream' } });
  t.is(r.status, 200);
  t.is(r.headers.get('content-type'), 'text/event-stream');
  const delays: number[] = [];
  let text = '';
  for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
    text += Buffer.from(chunk).toString();
    let i: number;
    while ((i = text.indexOf('\n\n')) >= 0) {
      delays.push(Date.now() - JSON.parse(text.slice(6, i)).sent);
      text = text.slice(i + 2);
    }
  }
  t.is(delays.length, 5);
  t.log(`event delays (ms): ${delays.join(', ')}`);
  for (const d of delays) t.true(d < 150, `an event arrived ${d} ms after it was sent`);
});

test.serial('proxy: a client that goes away mid-response cancels the request to the service', async (t) => {
  const closed = new Promise<void>((resolve) => { slowClosed = resolve; });
  const ac = new AbortController();
  const r = await fetch(`${hub.url}/services/echo/slow`, { signal: ac.signal });
  const reader = r.body!.getReader();
  await reader.read();
  ac.abort();
  const started = Date.now();
  await Promise.race([closed, sleep(3000).then(() => { throw new Error('the service still streams 3 s after the client left'); })]);
  t.true(Date.now() - started < 3000);
});

test.serial('proxy: a client that goes away mid-upload cancels the upload to the service', async (t) => {
  const aborted = new Promise<void>((resolve) => { uploadAborted = resolve; });
  const req = http.request({ host: '127.0.0.1', port: hub.port, method: 'POST', path: '/services/echo/sink', agent: false, headers: { 'content-length': String(10 * 1024 * 1024) } });
  req.on('error', () => undefined);
  req.write(Buffer.alloc(1024 * 1024));
  await sleep(200);
  req.destroy();
  await Promise.race([aborted, sleep(3000).then(() => { throw new Error('the service still waits for the body 3 s after the client left'); })]);
  t.pass();
});

test('proxy: a service that dies mid-response leaves the client with a broken response, not a complete one', async (t) => {
  for (const path of ['/services/echo/crash', '/services/echo/crash-chunked']) {
    const r = await fetch(`${hub.url}${path}`);
    t.is(r.status, 200);
    await t.throwsAsync(r.arrayBuffer(), undefined, path);
  }
  t.is((await fetch(`${hub.url}/services/echo/after-crash`)).status, 200, 'the route still works');
});

test('proxy: an unreachable service is a 503, JSON for API clients and a page for browsers', async (t) => {
  const json = await fetch(`${hub.url}/services/down/api/x`);
  t.is(json.status, 503);
  t.regex(json.headers.get('content-type') ?? '', /application\/json/);
  t.is((await json.json()).status, 503);
  const page = await fetch(`${hub.url}/services/down/`, { headers: { accept: 'text/html,application/xhtml+xml' } });
  t.is(page.status, 503);
  t.regex(page.headers.get('content-type') ?? '', /text\/html/);
  t.regex(await page.text(), /<h1>503 Service Unavailable<\/h1>/);
});

test('proxy: a user path without a running server is sent to the hub page for it; other unknown paths are the hub\'s 404', async (t) => {
  const r = await fetch(`${hub.url}/user/nobody/lab/tree?reset=1`, { redirect: 'manual' });
  t.is(r.status, 302);
  t.is(r.headers.get('location'), '/hub/user/nobody/lab/tree?reset=1');
  t.is((await fetch(`${hub.url}/services/nourl/`)).status, 404, 'a service without a url has no route');
  t.is((await fetch(`${hub.url}/nowhere`)).status, 404);
});

test.serial('proxy: no path escapes its route: dot segments and encodings are resolved once, before matching', async (t) => {
  seen.echo.length = 0;
  seen.secret.length = 0;
  const attempts = [
    '/services/echo/../secret/x', '/services/echo/%2e%2e/secret/x', '/services/echo/%2E%2E%2Fsecret/x',
    '/services/echo/..%2f..%2fservices/secret/x', '/services/echo%2fsecret/x', '/services/echo/a/../../secret/',
    '/services/echo/./.%2e/.%2E/services/secret/', '/services/echo\\..\\secret\\x', '/services/ech%6f/ok', '/services/echox/',
    '/services/echo/%5c..%5csecret', '/services/secret/../echo/back',
  ];
  for (const path of attempts) await rawRequest(hub.port, 'GET', path);
  t.true(seen.echo.length > 0 && seen.secret.length > 0);
  for (const p of seen.echo) t.true(p.startsWith('/services/echo/'), `echo saw ${p}`);
  for (const p of seen.secret) t.true(p.startsWith('/services/secret/'), `secret saw ${p}`);
  t.false(seen.echo.some((p) => p.split('?')[0].split('/').includes('..')), 'no dot segment reached a service');
  // a decodable but unacceptable path is refused outright
  for (const path of ['/services/echo/%00', '/services/echo/%zz', '/services/echo/a%0d%0aSet-Cookie:x']) {
    t.is((await rawRequest(hub.port, 'GET', path)).status, 400, path);
  }
});

test.serial('proxy: forwarded traffic is published as route activity, coalesced, and shows in GET /hub/api/proxy', async (t) => {
  const messages: Record<string, string>[] = [];
  const sub = nc.subscribe('hub.evt.activity.proxy', { callback: (_e, m) => messages.push(JSON.parse(new TextDecoder().decode(m.data)).routes) });
  await nc.flush();
  const before = new Date().toISOString();
  for (let i = 0; i < 20; i++) await fetch(`${hub.url}/services/echo/activity`).then((r) => r.arrayBuffer());
  await waitFor('an activity message', async () => (messages.some((m) => m['/services/echo/']) ? true : undefined), 5000);
  await sleep(1500);
  sub.unsubscribe();
  const mentions = messages.filter((m) => m['/services/echo/']);
  t.true(mentions.length <= 2, `20 requests within a second were published ${mentions.length} times`);
  t.true(mentions[0]['/services/echo/'] >= before);
  const routes = await waitFor('last_activity in the API', async () => {
    const r = await api('GET', '/proxy', { token: ADMIN });
    return r.body['/services/echo/']?.data.last_activity >= before ? r.body : undefined;
  }, 5000);
  t.is(routes['/services/echo/'].data.service, 'echo');
});

test('proxy api: GET lists the table keyed by routespec, paginated in routespec order with the envelope', async (t) => {
  const all = await api('GET', '/proxy', { token: ADMIN });
  t.is(all.status, 200);
  t.deepEqual(Object.keys(all.body).sort(), ['/', '/services/down/', '/services/echo/', '/services/secret/']);
  t.deepEqual(all.body['/'], { routespec: '/', target: `http://127.0.0.1:${hub.port}`, data: { hub: true } });
  t.like(all.body['/services/secret/'], { routespec: '/services/secret/', data: { service: 'secret' } });
  const page = await api('GET', '/proxy?offset=1&limit=2', { token: ADMIN, headers: { accept: 'application/hub-pagination+json' } });
  t.deepEqual(Object.keys(page.body.items), ['/services/down/', '/services/echo/']);
  t.like(page.body._pagination, { offset: 1, limit: 2, total: 4 });
  t.regex(page.body._pagination.next.url, /offset=3&limit=2/);
  t.is((await api('GET', '/proxy', { token: PLEB })).status, 403);
  t.is((await api('GET', '/proxy')).status, 403);
});

test('proxy api: POST reconciles (200, empty JSON); PATCH checks its body and refuses to repoint the built-in proxy', async (t) => {
  const post = await api('POST', '/proxy', { token: ADMIN });
  t.is(post.status, 200);
  t.is(post.body, null);
  t.regex(post.headers.get('content-type') ?? '', /application\/json/);
  t.is((await api('POST', '/proxy', { token: PLEB })).status, 403);
  const empty = await api('PATCH', '/proxy', { token: ADMIN });
  t.is(empty.status, 400);
  t.is(empty.body.message, 'need JSON body');
  for (const bad of ['[1]', '{nope', '"x"']) {
    const r = await api('PATCH', '/proxy', { token: ADMIN, body: bad });
    t.is(r.status, 400, bad);
    t.is(r.body.message, 'Request body must be JSON dict', bad);
  }
  const repoint = await api('PATCH', '/proxy', { token: ADMIN, body: { api_url: 'http://127.0.0.1:8001', auth_token: 'x' } });
  t.is(repoint.status, 400);
  t.regex(repoint.body.message, /built in/);
  t.is((await api('PATCH', '/proxy', { token: ADMIN, body: { other: 1 } })).status, 200, 'other keys are ignored');
});
