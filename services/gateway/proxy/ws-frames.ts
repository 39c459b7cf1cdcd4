// The client side of RFC 6455 framing, for the gateway's connection to a WebSocket target (uWS is
// the server side towards the browser). Frames the gateway sends are masked; frames it reads are handed on
// one by one (a fragmented message's frames as fragments, never reassembled), a message's size limited.
import { randomFillSync } from 'node:crypto';

export const OP = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa } as const;

/** Mask keys come from a pool of random bytes refilled 4 KiB at a time, not one random call per frame. */
const maskPool = Buffer.allocUnsafe(4096);
let maskOffset = maskPool.length;
/** The current mask key as one 32-bit word, read in the machine's byte order like the payload words it masks. */
const maskWord = new Int32Array(1);
const maskBytes = new Uint8Array(maskWord.buffer);

function nextMask(): void {
  if (maskOffset === maskPool.length) {
    randomFillSync(maskPool);
    maskOffset = 0;
  }
  for (let i = 0; i < 4; i++) maskBytes[i] = maskPool[maskOffset + i];
  maskOffset += 4;
}

/** Below this many bytes a payload is masked byte by byte: a word view would cost more than it saves. */
const WORDWISE_FROM = 128;

/**
 * A masked frame with FIN set. A larger payload is copied once (memcpy) and masked in place a 32-bit word
 * at a time: the frame is placed so that its payload starts on a 4-byte boundary of its memory.
 */
export function encodeFrame(opcode: number, payload: Uint8Array): Buffer {
  const len = payload.length;
  const headLen = (len < 126 ? 2 : len < 65536 ? 4 : 10) + 4;
  let frame: Buffer;
  if (len < WORDWISE_FROM) frame = Buffer.allocUnsafe(headLen + len);
  else {
    const memory = Buffer.allocUnsafe(headLen + len + 3);
    const pad = (4 - ((memory.byteOffset + headLen) & 3)) & 3;
    frame = memory.subarray(pad, pad + headLen + len);
  }
  frame[0] = 0x80 | opcode;
  if (len < 126) frame[1] = 0x80 | len;
  else if (len < 65536) {
    frame[1] = 0x80 | 126;
    frame.writeUInt16BE(len, 2);
  } else {
    frame[1] = 0x80 | 127;
    frame.writeUInt32BE(Math.floor(len / 2 ** 32), 2);
    frame.writeUInt32BE(len >>> 0, 6);
  }
  nextMask();
  for (let i = 0; i < 4; i++) frame[headLen - 4 + i] = maskBytes[i];
  if (len < WORDWISE_FROM) {
    for (let i = 0; i < len; i++) frame[headLen + i] = payload[i] ^ maskBytes[i & 3];
    return frame;
  }
  frame.set(payload, headLen);
  const words = len >>> 2;
  const view = new Int32Array(frame.buffer, frame.byteOffset + headLen, words);
  const key = maskWord[0];
  for (let i = 0; i < words; i++) view[i] ^= key;
  for (let i = words << 2; i < len; i++) frame[headLen + i] ^= maskBytes[i & 3];
  return frame;
}

/** A close frame's payload: code and reason, or empty when there is no code to send. */
export function closePayload(code: number, reason: Uint8Array): Buffer {
  if (!code || code === 1005 || code === 1006 || code === 1015) return Buffer.alloc(0);
  const out = Buffer.allocUnsafe(2 + Math.min(reason.length, 123));
  out.writeUInt16BE(code, 0);
  Buffer.from(reason.buffer, reason.byteOffset, Math.min(reason.length, 123)).copy(out, 2);
  return out;
}

export interface FrameHandlers {
  message(data: Buffer, binary: boolean): void;
  /** one frame of a fragmented message, passed on as a frame (never reassembled): `first` has the type, `last` ends it */
  fragment(data: Buffer, binary: boolean, first: boolean, last: boolean): void;
  ping(data: Buffer): void;
  pong(data: Buffer): void;
  close(code: number, reason: Buffer): void;
  /** a protocol violation or a message over the limit, with the close code to use */
  error(code: number, why: string): void;
}

/**
 * Reads frames from a byte stream. A frame wholly inside one read is delivered as a view of that read
 * (no copy); a frame spread over reads is copied once, straight into a buffer of its payload's size; only a
 * header cut in two (at most 13 bytes) is kept aside and joined with the next read.
 */
export class FrameReader {
  /** the start of a frame header that the last read cut off (a copy) */
  private pending: Buffer | null = null;
  /** the payload of a frame whose header was read, filling over reads */
  private body: Buffer | null = null;
  private bodyFilled = 0;
  private bodyOpcode = 0;
  private bodyFin = false;
  private bodyMask = -1;
  /** inside a fragmented message: its type, and its size so far (the limit holds for the whole message) */
  private fragmented = false;
  private fragmentsSize = 0;
  private fragmentedBinary = false;
  private failed = false;

  constructor(private readonly maxMessage: number, private readonly on: FrameHandlers) {}

  /** `data` may be a view of a reused read buffer: whatever stays buffered after this call is copied. */
  push(data: Buffer): void {
    if (this.failed) return;
    let offset = 0;
    if (this.body) {
      offset = Math.min(this.body.length - this.bodyFilled, data.length);
      data.copy(this.body, this.bodyFilled, 0, offset);
      this.bodyFilled += offset;
      if (this.bodyFilled < this.body.length) return;
      const body = this.body;
      this.body = null;
      if (this.bodyMask !== -1) unmask(body, 0, body.length, this.bodyMask);
      this.deliver(this.bodyOpcode, this.bodyFin, body);
    }
    if (this.pending) {
      data = Buffer.concat([this.pending, data.subarray(offset)]);
      this.pending = null;
      offset = 0;
    }
    while (!this.failed && offset < data.length) {
      const used = this.readFrame(data, offset);
      if (used === 0) {
        if (this.failed) return;
        this.pending = Buffer.from(data.subarray(offset)); // a copy: the read buffer is reused
        return;
      }
      offset += used;
    }
  }

  /** Reads one frame at `offset`: the bytes it took (a frame's start when its payload runs on), 0 when its header is not all there. */
  private readFrame(data: Buffer, offset: number): number {
    const available = data.length - offset;
    if (available < 2) return 0;
    const b0 = data[offset];
    const b1 = data[offset + 1];
    const fin = (b0 & 0x80) !== 0;
    const opcode = b0 & 0x0f;
    const masked = (b1 & 0x80) !== 0;
    let len = b1 & 0x7f;
    const headLen = 2 + (len === 126 ? 2 : len === 127 ? 8 : 0) + (masked ? 4 : 0);
    if (available < headLen) return 0;
    if (len === 126) len = data.readUInt16BE(offset + 2);
    else if (len === 127) len = data.readUInt32BE(offset + 2) * 2 ** 32 + data.readUInt32BE(offset + 6);
    if ((b0 & 0x70) !== 0) return this.fail(1002, 'reserved bits set (no extension was negotiated)');
    if (opcode >= 0x8 && (len > 125 || !fin)) return this.fail(1002, 'bad control frame');
    if (opcode < 0x8 && this.fragmentsSize + len > this.maxMessage) return this.fail(1009, 'message too big');
    const key = masked ? data.readInt32LE(offset + headLen - 4) : -1;
    const start = offset + headLen;
    if (available >= headLen + len) {
      const payload = data.subarray(start, start + len);
      if (masked) unmask(payload, 0, len, key);
      this.deliver(opcode, fin, payload);
      return headLen + len;
    }
    // the payload runs on into later reads: it gets a buffer of its own, filled as they come
    this.body = Buffer.allocUnsafe(len);
    this.bodyFilled = data.copy(this.body, 0, start);
    this.bodyOpcode = opcode;
    this.bodyFin = fin;
    this.bodyMask = key;
    return available;
  }

  private deliver(opcode: number, fin: boolean, payload: Buffer): void {
    switch (opcode) {
      case OP.ping: return this.on.ping(payload);
      case OP.pong: return this.on.pong(payload);
      case OP.close: return this.on.close(payload.length >= 2 ? payload.readUInt16BE(0) : 1005, payload.subarray(2));
      case OP.text:
      case OP.binary:
        if (this.fragmented) return void this.fail(1002, 'new message inside a fragmented one');
        if (fin) return this.on.message(payload, opcode === OP.binary);
        this.fragmented = true;
        this.fragmentedBinary = opcode === OP.binary;
        this.fragmentsSize = payload.length;
        return this.on.fragment(payload, this.fragmentedBinary, true, false);
      case OP.continuation:
        if (!this.fragmented) return void this.fail(1002, 'continuation without a message');
        this.fragmentsSize += payload.length;
        if (fin) {
          this.fragmented = false;
          this.fragmentsSize = 0;
        }
        return this.on.fragment(payload, this.fragmentedBinary, false, fin);
      default:
        this.fail(1002, `unknown opcode ${opcode}`);
    }
  }

  private fail(code: number, why: string): 0 {
    this.failed = true;
    this.on.error(code, why);
    return 0;
  }
}

/** Unmasks in place (a target should not mask its frames; if it does, they are read all the same). */
function unmask(buf: Buffer, start: number, len: number, keyLE: number): void {
  for (let i = 0; i < len; i++) buf[start + i] ^= (keyLE >>> ((i & 3) * 8)) & 0xff;
}
