// The gateway's RFC 6455 framing towards targets (proxy/ws-frames.ts), byte for byte: frames it writes are
// masked and decode to the payload with 7-, 16- and 64-bit lengths; frames it reads arrive whole however the
// stream is cut (a header split across reads, a payload over many reads, several frames in one read), and a
// message fragmented across frames is handed on frame by frame, in order, its size limit counting the whole
// message. Frames are built here by hand from the RFC.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { encodeFrame, FrameReader, OP } from '../../services/gateway/proxy/ws-frames.js';

type Event = [string, ...unknown[]];

/** A server frame (unmasked unless a key is given), as RFC 6455 §5.2 lays it out. */
function frame(opcode: number, payload: Buffer, { fin = true, key }: { fin?: boolean; key?: Buffer } = {}): Buffer {
  const len = payload.length;
  const ext = len < 126 ? Buffer.alloc(0) : len < 65536 ? Buffer.alloc(2) : Buffer.alloc(8);
  if (len >= 126 && len < 65536) ext.writeUInt16BE(len);
  if (len >= 65536) ext.writeBigUInt64BE(BigInt(len));
  const head = Buffer.from([(fin ? 0x80 : 0) | opcode, (key ? 0x80 : 0) | (len < 126 ? len : len < 65536 ? 126 : 127)]);
  const body = key ? Buffer.from(payload.map((b, i) => b ^ key[i & 3])) : payload;
  return Buffer.concat([head, ext, key ?? Buffer.alloc(0), body]);
}

function reader(max = 64 * 1024 * 1024): { r: FrameReader; events: Event[] } {
  const events: Event[] = [];
  const r = new FrameReader(max, {
    message: (data, binary) => events.push(['message', Buffer.from(data), binary]),
    fragment: (data, binary, first, last) => events.push(['fragment', Buffer.from(data), binary, first, last]),
    ping: (data) => events.push(['ping', Buffer.from(data)]),
    pong: (data) => events.push(['pong', Buffer.from(data)]),
    close: (code, reason) => events.push(['close', code, reason.toString()]),
    error: (code, why) => events.push(['error', code, why]),
  });
  return { r, events };
}

/** Feeds `bytes` in the given cut sizes, each cut through a reused buffer as node's reads are (so kept views would be overwritten). */
function feed(r: FrameReader, bytes: Buffer, cuts: number[]): void {
  const scratch = Buffer.alloc(bytes.length);
  let at = 0;
  for (let i = 0; at < bytes.length; i++) {
    const n = Math.min(cuts[i % cuts.length], bytes.length - at);
    bytes.copy(scratch, 0, at, at + n);
    r.push(scratch.subarray(0, n));
    scratch.fill(0xee);
    at += n;
  }
}

/** Decodes a frame the gateway wrote, checking it is masked. */
function decodeMasked(f: Buffer): { fin: boolean; opcode: number; payload: Buffer } {
  let len = f[1] & 0x7f;
  let at = 2;
  if (len === 126) { len = f.readUInt16BE(2); at = 4; }
  else if (len === 127) { len = Number(f.readBigUInt64BE(2)); at = 10; }
  if (!(f[1] & 0x80)) throw new Error('frame not masked');
  const key = f.subarray(at, at + 4);
  const payload = Buffer.from(f.subarray(at + 4).map((b, i) => b ^ key[i & 3]));
  if (f.length !== at + 4 + len) throw new Error(`frame is ${f.length} bytes, its header says ${at + 4 + len}`);
  return { fin: (f[0] & 0x80) !== 0, opcode: f[0] & 0x0f, payload };
}

for (const size of [0, 1, 5, 125, 126, 1000, 65535, 65536, 300_001]) {
  test(`ws-frames: a ${size}-byte payload is written masked with the right length field and decodes to itself`, (t) => {
    const payload = randomBytes(size);
    // an unaligned view, as a slice of a larger message may be
    const view = Buffer.concat([Buffer.alloc(3), payload]).subarray(3);
    const f = encodeFrame(OP.binary, view);
    t.is(f[1] & 0x7f, size < 126 ? size : size < 65536 ? 126 : 127);
    const d = decodeMasked(f);
    t.true(d.fin);
    t.is(d.opcode, OP.binary);
    t.true(d.payload.equals(payload));
  });
}

test('ws-frames: two frames of the same payload get different mask keys', (t) => {
  const payload = Buffer.from('same payload');
  t.notDeepEqual(encodeFrame(OP.text, payload), encodeFrame(OP.text, payload));
});

for (const size of [10, 126, 70_000]) {
  test(`ws-frames: a ${size}-byte frame arrives whole when cut into reads of every size from 1 byte up`, (t) => {
    const payload = randomBytes(size);
    const bytes = Buffer.concat([frame(OP.binary, payload), frame(OP.text, Buffer.from('next'))]);
    for (const cut of [1, 2, 3, 7, 13, 100, 4096, 65536, bytes.length]) {
      const { r, events } = reader();
      feed(r, bytes, [cut]);
      t.deepEqual(events, [['message', payload, true], ['message', Buffer.from('next'), false]], `reads of ${cut} bytes`);
    }
  });
}

test('ws-frames: a header split across reads at each of its bytes (16- and 64-bit lengths, masked)', (t) => {
  const key = Buffer.from([1, 2, 3, 4]);
  for (const size of [300, 70_000]) {
    const payload = randomBytes(size);
    const bytes = frame(OP.binary, payload, { key });
    const headLen = size < 65536 ? 8 : 14;
    for (let split = 1; split < headLen; split++) {
      const { r, events } = reader();
      feed(r, bytes, [split, bytes.length]);
      t.deepEqual(events, [['message', payload, true]], `${size} bytes, split after ${split}`);
    }
  }
});

test('ws-frames: several frames in one read, controls among them, each delivered in order', (t) => {
  const { r, events } = reader();
  r.push(Buffer.concat([frame(OP.text, Buffer.from('a')), frame(OP.ping, Buffer.from('p')), frame(OP.binary, Buffer.from('b')), frame(OP.pong, Buffer.alloc(0))]));
  t.deepEqual(events, [['message', Buffer.from('a'), false], ['ping', Buffer.from('p')], ['message', Buffer.from('b'), true], ['pong', Buffer.alloc(0)]]);
});

test('ws-frames: a message fragmented across frames (a ping between them, cut across reads) is handed on as its frames, in order', (t) => {
  const parts = [randomBytes(5000), randomBytes(70_000), randomBytes(3)];
  const bytes = Buffer.concat([
    frame(OP.binary, parts[0], { fin: false }),
    frame(OP.continuation, parts[1], { fin: false }),
    frame(OP.ping, Buffer.from('between')),
    frame(OP.continuation, parts[2]),
    frame(OP.text, Buffer.from('then a whole one')),
  ]);
  for (const cut of [1, 999, bytes.length]) {
    const { r, events } = reader();
    feed(r, bytes, [cut]);
    t.deepEqual(events, [
      ['fragment', parts[0], true, true, false],
      ['fragment', parts[1], true, false, false],
      ['ping', Buffer.from('between')],
      ['fragment', parts[2], true, false, true],
      ['message', Buffer.from('then a whole one'), false],
    ], `reads of ${cut} bytes`);
  }
});

test('ws-frames: the size limit counts a fragmented message whole: the fragment that passes it is refused with 1009', (t) => {
  const { r, events } = reader(1000);
  r.push(Buffer.concat([frame(OP.text, Buffer.alloc(600, 97), { fin: false }), frame(OP.continuation, Buffer.alloc(600, 98)), frame(OP.text, Buffer.from('after'))]));
  t.deepEqual(events, [['fragment', Buffer.alloc(600, 97), false, true, false], ['error', 1009, 'message too big']]);
});

test('ws-frames: close code and reason are read; a bare close has 1005', (t) => {
  const { r, events } = reader();
  const payload = Buffer.concat([Buffer.from([0x0f, 0xa2]), Buffer.from('bye')]);
  r.push(frame(OP.close, payload));
  const other = reader();
  other.r.push(frame(OP.close, Buffer.alloc(0)));
  t.deepEqual(events, [['close', 4002, 'bye']]);
  t.deepEqual(other.events, [['close', 1005, '']]);
});

test('ws-frames: protocol errors and a message over the limit are refused with their close codes, and nothing after is read', (t) => {
  const cases: [Buffer, number][] = [
    [Buffer.from([0xc1, 0x00]), 1002], // RSV1 without an extension
    [frame(OP.ping, Buffer.alloc(126)), 1002], // control frame too long
    [frame(OP.ping, Buffer.alloc(1), { fin: false }), 1002], // fragmented control frame
    [frame(OP.continuation, Buffer.from('x')), 1002], // continuation without a start
    [Buffer.concat([frame(OP.text, Buffer.from('a'), { fin: false }), frame(OP.text, Buffer.from('b'))]), 1002],
    [frame(0x3, Buffer.alloc(0)), 1002], // reserved opcode
    [frame(OP.binary, Buffer.alloc(2000)), 1009], // over the reader's limit of 1000 bytes
  ];
  for (const [bytes, code] of cases) {
    const { r, events } = reader(1000);
    r.push(Buffer.concat([bytes, frame(OP.text, Buffer.from('after'))]));
    const refused = events.filter((e) => e[0] !== 'fragment'); // a fragmented message's first frame was handed on
    t.is(refused.length, 1, bytes.subarray(0, 2).toString('hex'));
    t.is(refused[0][0], 'error');
    t.is(refused[0][1], code);
  }
});
