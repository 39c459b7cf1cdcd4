// WebSocket proxying: the target (a `ws` server registered as a service) sees the client's upgrade,
// refuses or accepts it, and then messages, pings, close codes and large messages pass both ways.
import test, { type ExecutionContext } from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import WebSocket, { WebSocketServer } from 'ws';
import { sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { listen, peakRss, rssMb } from './helpers.js';

let hub: HubUnderTest;
let server: http.Server;
/** What the target saw, per connection id (?id=...). */
const closes = new Map<string, { code: number; reason: string }>();
const upgrades = new Map<string, http.IncomingHttpHeaders>();
const serverSide = new Map<string, WebSocket>();

function wsBackend(): http.Server {
  const srv = http.createServer((_req, res) => res.end('plain'));
  const wss = new WebSocketServer({ noServer: true, maxPayload: 64 * 1024 * 1024, handleProtocols: (protocols) => (protocols.has('superchat') ? 'superchat' : false) });
  srv.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url!, 'http://x');
    if (url.pathname.endsWith('/refuse')) {
      socket.end('HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: 22\r\nConnection: close\r\n\r\n{"message":"go away"}\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const id = url.searchParams.get('id') ?? '';
      upgrades.set(id, req.headers);
      serverSide.set(id, ws);
      ws.on('close', (code, reason) => closes.set(id, { code, reason: reason.toString() }));
      if (url.pathname.endsWith('/echo')) ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
      if (url.pathname.endsWith('/bye')) ws.on('message', () => ws.close(4002, 'server bye'));
      if (url.pathname.endsWith('/fragments')) {
        ws.send('first half, ', { fin: false });
        ws.send('second half', { fin: true });
      }
      if (url.pathname.endsWith('/big-fragments')) {
        // a binary message in three frames with 16- and 64-bit lengths, a ping between them, then a whole one
        BIG_FRAGMENTS.forEach((part, i) => {
          ws.send(part, { binary: true, fin: i === BIG_FRAGMENTS.length - 1 });
          if (i === 0) ws.ping('between');
        });
        ws.send('after');
      }
      if (url.pathname.endsWith('/ping')) {
        ws.on('pong', (data) => ws.send(`pong:${data}`));
        ws.ping('hello');
      }
      if (url.pathname.endsWith('/flood')) {
        ws.on('message', () => {
          for (let i = 0; i < FLOOD; i++) ws.send(Buffer.alloc(1024 * 1024, i));
        });
      }
    });
  });
  return srv;
}
const FLOOD = 100;
const BIG_FRAGMENTS = [randomBytes(300), randomBytes(3 * 1024 * 1024), randomBytes(70_000)];

test.before(async () => {
  server = wsBackend();
  const port = await listen(server);
  hub = await startHub({ config: { Hub: { services: [{ name: 'ws', url: `http://127.0.0.1:${port}` }] } } });
  await waitFor('the ws route', async () => ((await fetch(`${hub.url}/services/ws/`)).status === 200 ? true : undefined));
});
test.after.always(async () => {
  if (process.env.DEBUG_LOGS) console.log(hub?.logs().split('\n').filter((l) => /gateway|proxy/.test(l)).slice(-30).join('\n'));
  await hub?.stop();
  server?.closeAllConnections();
  server?.close();
});

let ids = 0;
interface Client { ws: WebSocket; id: string; next(): Promise<{ data: Buffer; isBinary: boolean }> }

/** Connects; messages are queued from the start (a target may speak in the same packet as its 101). */
function connect(path: string, opts: WebSocket.ClientOptions & { protocols?: string[] } = {}): Promise<Client> {
  const id = String(++ids);
  const ws = new WebSocket(`ws://127.0.0.1:${hub.port}/services/ws/${path}?id=${id}`, opts.protocols ?? [], { maxPayload: 64 * 1024 * 1024, ...opts });
  const queue: { data: Buffer; isBinary: boolean }[] = [];
  const waiting: ((m: { data: Buffer; isBinary: boolean }) => void)[] = [];
  ws.on('message', (data, isBinary) => {
    const m = { data: data as Buffer, isBinary };
    const w = waiting.shift();
    if (w) w(m);
    else queue.push(m);
  });
  const next = () => new Promise<{ data: Buffer; isBinary: boolean }>((resolve) => {
    const m = queue.shift();
    if (m) resolve(m);
    else waiting.push(resolve);
  });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, id, next }));
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(Object.assign(new Error(`unexpected response ${res.statusCode}`), { status: res.statusCode, res })));
  });
}

const closed = (ws: WebSocket): Promise<{ code: number; reason: string }> =>
  new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));

test('websocket: text and binary messages echo through, types kept; the target sees the client\'s headers', async (t) => {
  const { ws, id, next } = await connect('echo', { headers: { cookie: 'session=abc' }, protocols: ['chat', 'superchat'] });
  t.is(ws.protocol, 'superchat', 'the subprotocol the target chose');
  ws.send('hello');
  const text = await next();
  t.false(text.isBinary);
  t.is(text.data.toString(), 'hello');
  ws.send(Buffer.from([0, 1, 2, 255]));
  const bin = await next();
  t.true(bin.isBinary);
  t.deepEqual([...bin.data], [0, 1, 2, 255]);
  const h = upgrades.get(id)!;
  t.is(h.cookie, 'session=abc');
  t.is(h['x-forwarded-for'], '127.0.0.1');
  t.is(h.host, `127.0.0.1:${hub.port}`);
  ws.close();
});

test('websocket: a 10 MB message passes each way intact', async (t) => {
  const { ws, next } = await connect('echo');
  const big = randomBytes(10 * 1024 * 1024);
  ws.send(big);
  const back = await next();
  t.is(back.data.length, big.length);
  t.is(createHash('sha256').update(back.data).digest('hex'), createHash('sha256').update(big).digest('hex'));
  ws.close();
});

test('websocket: a fragmented message from the target arrives whole', async (t) => {
  const { ws, next } = await connect('fragments');
  t.is((await next()).data.toString(), 'first half, second half');
  ws.close();
});

test('websocket: a large binary message the target sent in frames (a ping among them) arrives whole, binary, before the next', async (t) => {
  const { ws, next } = await connect('big-fragments');
  const first = await next();
  t.true(first.isBinary);
  t.true(first.data.equals(Buffer.concat(BIG_FRAGMENTS)));
  t.is((await next()).data.toString(), 'after');
  ws.close();
});

test('websocket: pings both ways: the client gets its pong, the target\'s ping reaches the client and its pong goes back', async (t) => {
  const { ws, next } = await connect('ping');
  const reply = await next(); // the target pinged on open; ws auto-answers, the target reports the pong
  t.is(reply.data.toString(), 'pong:hello');
  const pong = new Promise<Buffer>((resolve) => ws.once('pong', resolve));
  ws.ping('are you there');
  t.is((await pong).toString(), 'are you there');
  ws.close();
});

test('websocket: close codes and reasons pass both ways', async (t) => {
  const a = await connect('echo');
  a.ws.close(4001, 'client bye');
  const clientSide = await closed(a.ws);
  t.is(clientSide.code, 4001);
  const seen = await waitFor('the target to see the close', async () => closes.get(a.id), 3000);
  t.deepEqual(seen, { code: 4001, reason: 'client bye' });

  const b = await connect('bye');
  b.ws.send('close please');
  t.deepEqual(await closed(b.ws), { code: 4002, reason: 'server bye' });
});

test('websocket: when the target drops the connection, the client\'s connection drops too', async (t) => {
  const { ws, id } = await connect('echo');
  const gone = closed(ws);
  serverSide.get(id)!.terminate();
  t.is((await gone).code, 1006);
});

test('websocket: the target refusing the upgrade reaches the client as the target\'s own answer', async (t) => {
  const err = await t.throwsAsync(connect('refuse')) as Error & { status: number };
  t.is(err.status, 403);
});

test('websocket: an upgrade on a path without a route is not proxied', async (t) => {
  const ws = new WebSocket(`ws://127.0.0.1:${hub.port}/services/nothing/here`);
  const status = await new Promise<number>((resolve) => {
    ws.once('unexpected-response', (_req, res) => resolve(res.statusCode!));
    ws.once('open', () => resolve(101));
    ws.once('error', () => resolve(0));
  });
  t.is(status, 404);
});

/** Floods a paused client with FLOOD 1 MiB messages, then lets it read; returns the gateway's peak RSS meanwhile. */
async function flood(t: ExecutionContext): Promise<number> {
  const { ws, id } = await connect('flood');
  const received: Buffer[] = [];
  ws.on('message', (d) => received.push(d as Buffer));
  ws.pause();
  ws.send('go');
  const { peak } = await peakRss(hub.children().gateway!, async () => {
    await sleep(1000);
    // The target still holds most of the flood: the gateway stopped reading from it.
    t.true(serverSide.get(id)!.bufferedAmount > 50 * 1024 * 1024, `target buffered only ${serverSide.get(id)!.bufferedAmount} bytes`);
    ws.resume();
    await waitFor('the whole flood', async () => (received.length === FLOOD ? true : undefined), 20_000);
  });
  t.true(received.every((m, i) => m.length === 1024 * 1024 && m[0] === (i & 0xff) && m[m.length - 1] === (i & 0xff)), 'every message whole and in order');
  ws.close();
  return peak;
}

test.serial('websocket: a slow client pauses the target (backpressure), memory stays flat, nothing is lost', async (t) => {
  await flood(t); // warm-up: the heap grows once to its working size
  const before = rssMb(hub.children().gateway!);
  const peak = await flood(t);
  t.log(`gateway RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} MB while ${FLOOD} MB passed`);
  // well under the flood: buffering it would show; heap and socket-buffer noise under a loaded machine does not
  t.true(peak - before < 48, `gateway RSS grew by ${(peak - before).toFixed(0)} MB`);
});
