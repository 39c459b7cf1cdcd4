// The forwarder's own HTTP/1.1 reading, against a target that writes exact bytes: 1xx heads, chunked
// bodies with extensions and trailers, bodies that end with the connection, HEAD/204/304, heads split
// into single bytes, keep-alive reuse and the race of a reused connection closed by the target, and
// responses a strict reader refuses (502, never forwarded). In process: uWS + the proxy module.
import test from 'ava';
import net from 'node:net';
import type { NatsConnection } from 'nats';
import uWS from 'uWebSockets.js';
import { createLogger } from '../../shared/log.js';
import { createActivityRecorder } from '../../services/gateway/proxy/activity.js';
import { createProxy } from '../../services/gateway/proxy/index.js';
import { RouteTable } from '../../services/gateway/proxy/table.js';
import { sleep } from '../harness.js';
import { rawRequest } from './helpers.js';

interface Seen { method: string; path: string; body: string; connection: number; nth: number }
const seen: Seen[] = [];
let connections = 0;
let port = 0;
let listenSocket: uWS.us_listen_socket;
let server: net.Server;

/** What the target writes for a path: bytes (written at once), or a list of them (written apart). */
function answer(path: string, s: Seen): string | Buffer | string[] | null {
  switch (path) {
    case '/t/continue': return 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal';
    case '/t/chunked': return 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5;ext=1\r\nhello\r\n7 ; x="y"\r\n, world\r\n0\r\nX-Sum: 42\r\n\r\n';
    case '/t/until-close': return 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of this, then the end of the connection';
    case '/t/http10': return 'HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!';
    case '/t/head': return 'HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-Head: yes\r\n\r\n';
    case '/t/304': return 'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n';
    case '/t/204': return 'HTTP/1.1 204 No Content\r\nX-Empty: yes\r\n\r\n';
    case '/t/bytes': return [...'HTTP/1.1 201 Created\r\nX-Split: a\r\nContent-Length: 3\r\n\r\nabc'];
    case '/t/latin1': return Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nX-Name: caf'), Buffer.from([0xe9]), Buffer.from('\r\nContent-Length: 2\r\n\r\nok')]);
    case '/t/extra': return 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE';
    case '/t/keepalive': return `HTTP/1.1 200 OK\r\nContent-Length: ${String(s.connection).length}\r\n\r\n${s.connection}`;
    // the second request on a connection meets a target that closes it without answering
    case '/t/race': return s.nth === 1 ? `HTTP/1.1 200 OK\r\nContent-Length: ${String(s.connection).length}\r\n\r\n${s.connection}` : null;
    case '/t/fold': return 'HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nok';
    case '/t/cl-te': return 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n';
    case '/t/two-lengths': return 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!';
    case '/t/gzip-te': return 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n';
    case '/t/bad-chunk': return 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n';
    case '/t/bare-lf': return 'HTTP/1.1 200 OK\nContent-Length: 2\n\nok';
    case '/t/switch': return 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n';
    case '/t/bad-status': return 'HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nok';
    default: return `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(JSON.stringify(s))}\r\n\r\n${JSON.stringify(s)}`;
  }
}

/** A target that reads requests (Content-Length bodies) one after the other and answers as `answer` says. */
function rawTarget(): net.Server {
  return net.createServer((socket) => {
    const connection = ++connections;
    let nth = 0;
    let buf = Buffer.alloc(0);
    socket.on('error', () => undefined);
    socket.on('data', async (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1');
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        const [method, path] = head.split(' ');
        const s: Seen = { method, path, body: buf.subarray(end + 4, end + 4 + length).toString(), connection, nth: ++nth };
        buf = buf.subarray(end + 4 + length);
        seen.push(s);
        const out = answer(path.split('?')[0], s);
        if (out === null) return void socket.destroy();
        if (Array.isArray(out)) {
          for (const part of out) {
            socket.write(part);
            await sleep(2);
          }
        } else socket.write(method === 'HEAD' && path === '/t/default' ? '' : out);
        if (path === '/t/until-close' || path === '/t/http10') socket.end();
      }
    });
  });
}

test.before(async () => {
  server = rawTarget();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const table = new RouteTable();
  table.set({ routespec: '/t/', target: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, data: { service: 't' } });
  const nc = { publish: () => undefined } as unknown as NatsConnection;
  const log = createLogger('test', 'silent');
  const proxy = createProxy({ routes: () => table, activity: createActivityRecorder(nc, 60_000, log), nc, log, connectTimeoutMs: 2000, idleTimeoutMs: 2000 });
  const app = uWS.App().ws('/*', proxy.websocket).any('/*', (res, req) => {
    if (!proxy.handle(res, req)) res.writeStatus('404 Not Found').end();
  });
  listenSocket = await new Promise((resolve, reject) => app.listen('127.0.0.1', 0, (s) => (s ? resolve(s) : reject(new Error('no listen')))));
  port = uWS.us_socket_local_port(listenSocket as unknown as uWS.us_socket);
});
test.after.always(() => {
  if (listenSocket) uWS.us_listen_socket_close(listenSocket);
  server?.close();
});

const get = (path: string, method = 'GET', body?: Buffer) => rawRequest(port, method, path, body ? { 'content-length': String(body.length) } : {}, body);

test.serial('framing: 1xx heads are skipped and the final response forwarded', async (t) => {
  const r = await get('/t/continue');
  t.is(r.status, 200);
  t.is(r.body.toString(), 'final');
  t.false('link' in r.headers, 'nothing of the 103 leaks into the final response');
});

test.serial('framing: a chunked body with extensions arrives whole; its trailers are read and dropped', async (t) => {
  const r = await get('/t/chunked');
  t.is(r.status, 200);
  t.is(r.body.toString(), 'hello, world');
  t.false('x-sum' in r.headers);
  t.false('trailer' in r.headers, 'Trailer is hop-by-hop');
  t.is((await get('/t/after-chunked')).status, 200, 'the connection is still usable');
});

test.serial('framing: a body that ends with the connection, and an HTTP/1.0 answer, arrive whole', async (t) => {
  t.is((await get('/t/until-close')).body.toString(), 'all of this, then the end of the connection');
  t.is((await get('/t/http10')).body.toString(), 'old!');
});

test.serial('framing: HEAD, 204 and 304 have no body; HEAD keeps the declared length', async (t) => {
  const head = await get('/t/head', 'HEAD');
  t.is(head.status, 200);
  t.is(head.headers['x-head'], 'yes');
  t.is(head.headers['content-length'], '1234');
  t.is(head.body.length, 0);
  const notModified = await get('/t/304');
  t.is(notModified.status, 304);
  t.is(notModified.headers.etag, '"v1"');
  t.is(notModified.body.length, 0);
  const empty = await get('/t/204');
  t.is(empty.status, 204);
  t.is(empty.headers['x-empty'], 'yes');
  t.is((await get('/t/after-bodiless')).status, 200, 'the connection is still usable');
});

test.serial('framing: a head that arrives one byte at a time is read', async (t) => {
  const r = await get('/t/bytes');
  t.is(r.status, 201);
  t.is(r.headers['x-split'], 'a');
  t.is(r.body.toString(), 'abc');
});

test.serial('framing: header bytes beyond ASCII reach the client as sent', async (t) => {
  const r = await get('/t/latin1');
  const i = r.rawHeaders.findIndex((h) => h.toLowerCase() === 'x-name');
  t.is(Buffer.from(r.rawHeaders[i + 1], 'latin1').toString('hex'), Buffer.from([0x63, 0x61, 0x66, 0xe9]).toString('hex'));
});

test.serial('framing: keep-alive connections are reused; one with bytes after a response is not', async (t) => {
  const a = Number((await get('/t/keepalive')).body.toString());
  const b = Number((await get('/t/keepalive')).body.toString());
  t.is(a, b, 'the second request went on the first one\'s connection');
  t.is((await get('/t/extra')).body.toString(), 'ok', 'extra bytes are not part of the response');
  const c = Number((await get('/t/keepalive')).body.toString());
  t.not(c, b, 'the connection that carried extra bytes was not used again');
});

test.serial('framing: a reused connection the target closed is retried once for GET, never for a request with a body', async (t) => {
  const first = Number((await get('/t/race')).body.toString());
  // the same connection is reused and the target closes it without answering
  const retried = await get('/t/race');
  t.is(retried.status, 200);
  t.not(Number(retried.body.toString()), first, 'answered on a fresh connection');
  const before = seen.length;
  await get('/t/race'); // now the pooled connection is the fresh one, answered once already
  const post = await get('/t/race', 'POST', Buffer.from('once only'));
  t.is(post.status, 503);
  t.is(seen.slice(before).filter((s) => s.method === 'POST').length, 1, 'the POST reached the target exactly once');
});

test.serial('framing: responses a strict reader refuses are a 502, never forwarded', async (t) => {
  for (const path of ['/t/fold', '/t/cl-te', '/t/two-lengths', '/t/gzip-te', '/t/bad-chunk', '/t/bare-lf', '/t/switch', '/t/bad-status']) {
    if (path === '/t/bad-chunk') {
      // the head was fine: the response is cut off, never completed
      await t.throwsAsync(get(path), undefined, path);
      continue;
    }
    const r = await get(path);
    t.is(r.status, 502, path);
    t.is(JSON.parse(r.body.toString()).status, 502, path);
  }
  t.is((await get('/t/after-refusals')).status, 200);
});
