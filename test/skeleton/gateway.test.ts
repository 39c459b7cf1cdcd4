import test from 'ava';
import { connect } from 'node:net';
import { startHub, type HubUnderTest } from '../harness.js';

let hub: HubUnderTest;
const LIMIT = 64 * 1024;

test.before(async () => {
  hub = await startHub({ config: { Hub: { max_body_size: LIMIT } } });
});
test.after.always(async () => {
  await hub?.stop();
});

test('gateway: GET /hub/api answers the API version it implements (the established hub\'s) and its own', async (t) => {
  const r = await fetch(`${hub.url}/hub/api`);
  t.is(r.status, 200);
  t.regex(r.headers.get('content-type') ?? '', /application\/json/);
  const { version } = JSON.parse(await import('node:fs').then((fs) => fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')));
  t.deepEqual(await r.json(), { version: '6.1.1', hub_version: version });
});

test('gateway: health names every actor and runs on the native uWebSockets.js binary', async (t) => {
  const r = await fetch(`${hub.url}/hub/health`);
  t.is(r.status, 200);
  const body = await r.json();
  t.deepEqual(Object.keys(body.actors).sort(), ['auth', 'gateway', 'oauth', 'proxy-router', 'spawner', 'tokens']);
  t.is(body.actors.gateway.details.uws, 'native');
});

test('gateway: an unknown /hub/api path is a JSON 404', async (t) => {
  for (const path of ['/hub/api/nope', '/hub/api/users/x/y/z/w', '/hub/api/%2e%2e/x']) {
    const r = await fetch(`${hub.url}${path}`);
    t.is(r.status, 404, path);
    const body = await r.json();
    t.is(body.status, 404);
    t.is(typeof body.message, 'string');
  }
});

test('gateway: a browser gets a readable 404 page outside the API', async (t) => {
  const r = await fetch(`${hub.url}/nowhere`, { headers: { accept: 'text/html' } });
  t.is(r.status, 404);
  t.regex(await r.text(), /<h1>404 Not Found<\/h1>/);
});

/**
 * Sends a body over a raw socket, reading the answer while still sending, so a gateway that answers
 * early can be told from one that reads everything first.
 */
function postBody(path: string, size: number, chunked: boolean): Promise<{ status: number; body: string; sent: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(hub.port, '127.0.0.1');
    let sent = 0;
    let answer = '';
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      socket.destroy();
      const m = /^HTTP\/1\.1 (\d+)/.exec(answer);
      if (!m) return reject(new Error(`no HTTP answer after ${sent} bytes: ${JSON.stringify(answer.slice(0, 200))}`));
      resolve({ status: Number(m[1]), body: answer.slice(answer.indexOf('\r\n\r\n') + 4), sent });
    };
    socket.on('data', (d) => {
      answer += d;
      const headEnd = answer.indexOf('\r\n\r\n');
      const len = /content-length: (\d+)/i.exec(answer);
      if (headEnd > 0 && len && answer.length >= headEnd + 4 + Number(len[1])) finish();
    });
    socket.on('close', finish);
    socket.on('error', () => undefined); // EPIPE once the gateway has answered and closed
    const head = chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${size}`;
    socket.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n${head}\r\n\r\n`);
    const chunk = Buffer.alloc(16 * 1024, 120);
    const framed = chunked ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]) : chunk;
    const pump = () => {
      while (sent < size && !finished && !socket.destroyed) {
        sent += chunk.length;
        if (!socket.write(framed)) return void socket.once('drain', pump);
      }
      if (chunked && !finished && !socket.destroyed) socket.write('0\r\n\r\n');
    };
    pump();
  });
}

test('gateway: a declared body over the limit is refused with 413 before it is read', async (t) => {
  const r = await postBody('/hub/api/users', 200 * 1024 * 1024, false);
  t.is(r.status, 413);
  t.is(JSON.parse(r.body).status, 413);
  t.true(r.sent < 200 * 1024 * 1024, 'the gateway answered without waiting for the whole body');
});

test('gateway: a chunked body is refused with 413 once it crosses the limit', async (t) => {
  const r = await postBody('/hub/api/users', 50 * 1024 * 1024, true);
  t.is(r.status, 413);
  t.is(JSON.parse(r.body).status, 413);
  t.true(r.sent < 50 * 1024 * 1024);
});

test('gateway: a body under the limit is read and routing continues', async (t) => {
  const r = await postBody('/hub/api/nope', LIMIT / 2, false);
  t.is(r.status, 404);
});
