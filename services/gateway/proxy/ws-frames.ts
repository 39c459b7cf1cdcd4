// The client side of RFC 6455 framing, for the gateway's connection to a WebSocket target (uWS is
// the server side towards the browser). Frames the gateway sends are masked; frames it reads are
// reassembled into whole messages up to a size limit.
import { randomFillSync } from 'node:crypto';

export const OP = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa } as const;

/** Mask keys come from a pool of random bytes refilled 4 KiB at a time, not one random call per frame. */
const maskPool = Buffer.allocUnsafe(4096);
let maskOffset = maskPool.length;

function nextMask(into: Buffer): void {
  if (maskOffset === maskPool.length) {
    randomFillSync(maskPool);
    maskOffset = 0;
  }
  maskPool.copy(into, 0, maskOffset, maskOffset + 4);
  maskOffset += 4;
}

/** A masked frame with FIN set. */
export function encodeFrame(opcode: number, payload: Uint8Array): Buffer {
  const len = payload.length;
  const headLen = len < 126 ? 2 : len < 65536 ? 4 : 10;
  const frame = Buffer.allocUnsafe(headLen + 4 + len);
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
  const mask = frame.subarray(headLen, headLen + 4);
  nextMask(mask);
  const body = frame.subarray(headLen + 4);
  for (let i = 0; i < len; i++) body[i] = payload[i] ^ mask[i & 3];
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
  ping(data: Buffer): void;
  pong(data: Buffer): void;
  close(code: number, reason: Buffer): void;
  /** a protocol violation or a message over the limit, with the close code to use */
  error(code: number, why: string): void;
}

/** Reads frames from a byte stream; bytes are kept as received until a whole frame is there (no re-copying). */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private fragments: Buffer[] = [];
  private fragmentsSize = 0;
  private fragmentedBinary = false;
  private failed = false;

  constructor(private readonly maxMessage: number, private readonly on: FrameHandlers) {}

  /** `data` may be a view of a reused read buffer: whatever stays buffered after this call is copied. */
  push(data: Buffer): void {
    if (this.failed) return;
    this.chunks.push(data);
    this.buffered += data.length;
    while (!this.failed && this.readFrame());
    // earlier chunks are copies already; only what is left of this one is copied (once)
    const last = this.chunks.length - 1;
    if (last >= 0 && this.chunks[last].buffer === data.buffer) this.chunks[last] = Buffer.from(this.chunks[last]);
  }

  /** Bytes [0, n) of what is buffered, without consuming them. */
  private peek(n: number): Buffer {
    if (this.chunks[0].length >= n) return this.chunks[0];
    const joined = Buffer.concat(this.chunks, this.buffered);
    this.chunks = [joined];
    return joined;
  }

  private take(n: number): Buffer {
    if (n === 0) return Buffer.alloc(0);
    const first = this.chunks[0];
    let out: Buffer;
    if (first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let copied = 0;
      while (copied < n) {
        const c = this.chunks[0];
        const part = Math.min(c.length, n - copied);
        c.copy(out, copied, 0, part);
        copied += part;
        if (part === c.length) this.chunks.shift();
        else this.chunks[0] = c.subarray(part);
      }
    }
    this.buffered -= n;
    return out;
  }

  /** Consumes one frame if it is all there; false when more bytes are needed. */
  private readFrame(): boolean {
    if (this.buffered < 2) return false;
    let head = this.peek(2);
    const fin = (head[0] & 0x80) !== 0;
    const opcode = head[0] & 0x0f;
    const masked = (head[1] & 0x80) !== 0;
    let len = head[1] & 0x7f;
    let headLen = 2 + (len === 126 ? 2 : len === 127 ? 8 : 0) + (masked ? 4 : 0);
    if (this.buffered < headLen) return false;
    head = this.peek(headLen);
    if (len === 126) len = head.readUInt16BE(2);
    else if (len === 127) len = head.readUInt32BE(2) * 2 ** 32 + head.readUInt32BE(6);
    if ((head[0] & 0x70) !== 0) return this.fail(1002, 'reserved bits set (no extension was negotiated)');
    if (opcode >= 0x8 && (len > 125 || !fin)) return this.fail(1002, 'bad control frame');
    if (opcode < 0x8 && this.fragmentsSize + len > this.maxMessage) return this.fail(1009, 'message too big');
    if (this.buffered < headLen + len) return false;
    const mask = masked ? Buffer.from(head.subarray(headLen - 4, headLen)) : null;
    this.take(headLen);
    const payload = this.take(len);
    if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
    this.deliver(opcode, fin, payload);
    return true;
  }

  private deliver(opcode: number, fin: boolean, payload: Buffer): void {
    switch (opcode) {
      case OP.ping: return this.on.ping(payload);
      case OP.pong: return this.on.pong(payload);
      case OP.close: return this.on.close(payload.length >= 2 ? payload.readUInt16BE(0) : 1005, payload.subarray(2));
      case OP.text:
      case OP.binary:
        if (this.fragments.length) return void this.fail(1002, 'new message inside a fragmented one');
        if (fin) return this.on.message(payload, opcode === OP.binary);
        this.fragmentedBinary = opcode === OP.binary;
        this.fragments.push(Buffer.from(payload));
        this.fragmentsSize = payload.length;
        return;
      case OP.continuation: {
        if (!this.fragments.length) return void this.fail(1002, 'continuation without a message');
        this.fragments.push(Buffer.from(payload));
        this.fragmentsSize += payload.length;
        if (!fin) return;
        const whole = Buffer.concat(this.fragments, this.fragmentsSize);
        this.fragments = [];
        this.fragmentsSize = 0;
        return this.on.message(whole, this.fragmentedBinary);
      }
      default:
        this.fail(1002, `unknown opcode ${opcode}`);
    }
  }

  private fail(code: number, why: string): false {
    this.failed = true;
    this.on.error(code, why);
    return false;
  }
}
