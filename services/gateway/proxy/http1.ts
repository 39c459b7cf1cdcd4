// A small, strict reader of HTTP/1.1 responses, for the gateway's own connections to targets (the
// client side of node:http cost ~150 µs of CPU per forwarded request; this costs a few). It reads one
// response at a time, fed by whatever the socket delivers: the status line and headers, then a body
// framed by Content-Length, by chunked coding (chunks passed on as their data, trailers read and
// dropped) or by the end of the connection; 1xx heads are skipped, 101 ends the HTTP part (upgrade);
// HEAD, 204 and 304 have no body. Anything a strict reading refuses (obs-fold, Content-Length together
// with Transfer-Encoding, disagreeing lengths, codings other than chunked, bad chunk sizes, oversized
// heads) is an error, so a response cannot be read one way here and another way by the client.

const CRLFCRLF = Buffer.from('\r\n\r\n');
/** Largest response head (status line and headers), and largest chunk-size line or trailer section. */
export const MAX_HEAD = 64 * 1024;
const MAX_LINE = 4096;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// eslint-disable-next-line no-control-regex
const BAD_VALUE = /[\u0000-\u0008\u000a-\u001f\u007f]/;
/** Anywhere in a head: a control character other than HTAB, or a CR or LF that is not part of a CRLF. */
// eslint-disable-next-line no-control-regex
const BAD_HEAD = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]|\r(?!\n)|(?<!\r)\n/;
const NOT_ASCII = /[^\u0000-\u007f]/;
const DIGITS = /^[0-9]{1,15}$/;
/** Hex digit values by byte, -1 for others. */
const HEX = new Int8Array(256).fill(-1);
for (let i = 0; i < 10; i++) HEX[48 + i] = i;
for (let i = 0; i < 6; i++) HEX[65 + i] = HEX[97 + i] = 10 + i;
/** More hex digits than this in a chunk size is more than 2^52 bytes: refused. */
const MAX_HEX_DIGITS = 13;

export interface ResponseHead {
  status: number;
  /** `200 OK` as the target wrote it (code and reason), for the client's status line */
  statusText: string;
  /** flat [name, value, ...] as received: case and repeats kept, latin1 */
  headers: string[];
  /** the Connection header's value ('' when none) */
  connection: string;
  /** some header holds bytes beyond ASCII (they are latin1 characters in `headers`) */
  latin1: boolean;
  /** the declared body length, -1 when none */
  contentLength: number;
  chunked: boolean;
  /** the connection may carry another request after this response */
  keepAlive: boolean;
  /** `Keep-Alive: timeout=N` in seconds, 0 when not given */
  keepAliveTimeout: number;
}

export interface ResponseSink {
  /** the final head (1xx heads are skipped; 101 is final) */
  onHead(head: ResponseHead): void;
  /** part of the body: a view of the read buffer, to be used or copied before returning */
  onBody(chunk: Buffer): void;
  /** the whole response was read; `rest` holds bytes that followed it (the upgraded protocol's, after a 101) */
  onComplete(rest: Buffer | null): void;
  /** the target's bytes are not a response this reader accepts, or it closed mid-response */
  onError(why: string, beforeHead: boolean): void;
}

const enum State { Idle, Head, Length, ChunkSize, ChunkExt, ChunkSizeLf, ChunkData, ChunkCr, ChunkLf, TrailerStart, TrailerLf, Trailers, UntilClose, Done, Failed }

export class ResponseReader {
  private state = State.Idle;
  private noBody = false;
  private remaining = 0;
  /** bytes of an incomplete head or line, copied (the read buffer is reused) */
  private partial: Buffer | null = null;
  private trailerBytes = 0;
  /** the chunk size being read, its digits, and the extension's length */
  private size = 0;
  private digits = 0;
  private extension = 0;
  /** bytes of this response seen so far (0: the target has said nothing yet) */
  received = 0;

  constructor(private readonly sink: ResponseSink) {}

  /** Expect the response to a request with this method. */
  start(method: string): void {
    this.state = State.Head;
    this.noBody = method === 'HEAD';
    this.partial = null;
    this.trailerBytes = 0;
    this.received = 0;
  }

  /** Stop reading: nothing more reaches the sink. */
  abandon(): void {
    this.state = State.Failed;
    this.partial = null;
  }

  get done(): boolean {
    return this.state === State.Done;
  }

  get reading(): boolean {
    return this.state !== State.Idle && this.state !== State.Done && this.state !== State.Failed;
  }

  /** A body that ends with the connection is complete at its end; anything else is cut off. */
  eof(): void {
    if (this.state === State.UntilClose) return this.complete(null);
    if (this.reading) this.fail(this.state === State.Head ? 'closed before a complete response head' : 'closed mid-response');
  }

  push(buf: Buffer): void {
    if (!this.reading) return;
    this.received += buf.length;
    let pos = 0;
    while (pos < buf.length) {
      switch (this.state) {
        case State.Head: pos = this.readHead(buf, pos); break;
        case State.Length: {
          const n = Math.min(this.remaining, buf.length - pos);
          this.remaining -= n;
          const end = pos + n;
          this.sink.onBody(pos === 0 && end === buf.length ? buf : buf.subarray(pos, end));
          pos = end;
          if (this.remaining === 0 && this.state === State.Length) this.complete(rest(buf, pos));
          break;
        }
        case State.ChunkSize: {
          // hex digits, then an optional extension (ignored), then CRLF
          const c = buf[pos++];
          const v = HEX[c];
          if (v >= 0) {
            if (++this.digits > MAX_HEX_DIGITS) return void this.fail('chunk size too large');
            this.size = this.size * 16 + v;
          } else if (this.digits === 0) return void this.fail('malformed chunk size');
          else if (c === 13) this.state = State.ChunkSizeLf;
          else if (c === 59 || c === 32 || c === 9) this.state = State.ChunkExt;
          else return void this.fail('malformed chunk size');
          break;
        }
        case State.ChunkExt: {
          const c = buf[pos++];
          if (c === 13) this.state = State.ChunkSizeLf;
          else if ((c < 32 && c !== 9) || c === 127 || ++this.extension > MAX_LINE) return void this.fail('malformed chunk extension');
          break;
        }
        case State.ChunkSizeLf:
          if (buf[pos++] !== 10) return void this.fail('chunk size not followed by CRLF');
          if (this.size === 0) this.state = State.TrailerStart;
          else {
            this.state = State.ChunkData;
            this.remaining = this.size;
          }
          break;
        case State.ChunkData: {
          const n = Math.min(this.remaining, buf.length - pos);
          this.remaining -= n;
          const end = pos + n;
          this.sink.onBody(buf.subarray(pos, end));
          pos = end;
          if (this.remaining === 0 && this.state === State.ChunkData) this.state = State.ChunkCr;
          break;
        }
        case State.ChunkCr:
          if (buf[pos++] !== 13) return void this.fail('chunk data not followed by CRLF');
          this.state = State.ChunkLf;
          break;
        case State.ChunkLf:
          if (buf[pos++] !== 10) return void this.fail('chunk data not followed by CRLF');
          this.nextChunk();
          break;
        case State.TrailerStart:
          // usually the blank line at once; trailer fields are read line by line
          if (buf[pos] === 13) {
            pos++;
            this.state = State.TrailerLf;
          } else this.state = State.Trailers;
          break;
        case State.TrailerLf:
          if (buf[pos++] !== 10) return void this.fail('malformed trailer section');
          this.complete(rest(buf, pos));
          break;
        case State.Trailers: {
          const start = pos;
          pos = this.readLine(buf, pos, (line) => this.trailer(line));
          this.trailerBytes += pos - start;
          if (this.trailerBytes > MAX_HEAD && this.state === State.Trailers) return void this.fail('trailers too large');
          if ((this.state as State) === State.Done) return void this.sink.onComplete(rest(buf, pos));
          break;
        }
        case State.UntilClose:
          this.sink.onBody(pos === 0 ? buf : buf.subarray(pos));
          return;
        default:
          // Done (rest already handed over with onComplete) or Failed
          return;
      }
    }
  }

  private complete(rest: Buffer | null): void {
    this.state = State.Done;
    this.partial = null;
    this.sink.onComplete(rest);
  }

  private fail(why: string): void {
    const beforeHead = this.state === State.Head;
    this.state = State.Failed;
    this.partial = null;
    this.sink.onError(why, beforeHead);
  }

  /** Reads up to and including the blank line ending a head; returns the new position. */
  private readHead(buf: Buffer, pos: number): number {
    let data = buf;
    let start = pos;
    let from = pos;
    const held = this.partial ? this.partial.length : 0;
    if (this.partial) {
      data = Buffer.concat([this.partial, buf.subarray(pos)]);
      start = 0;
      from = Math.max(0, held - 3);
    }
    const end = data.indexOf(CRLFCRLF, from);
    if (end < 0) {
      // a head with bare LFs would never end for this reader: refused now, not after the idle timeout
      let s0 = held ? held : start; // only the new bytes (a CR at their end may yet be followed by its LF)
      if (data[s0] === 10 && s0 > start && data[s0 - 1] === 13) s0++;
      if (BAD_HEAD.test(data.toString('latin1', s0).replace(/\r$/, ''))) {
        this.fail('control character or bare CR/LF in the response head');
      } else if (data.length - start > MAX_HEAD) {
        this.fail('response head too large');
      } else {
        this.partial = Buffer.from(data.subarray(start)); // a copy: the read buffer is reused
      }
      return buf.length;
    }
    if (end - start > MAX_HEAD) {
      this.fail('response head too large');
      return buf.length;
    }
    this.partial = null;
    const next = pos + (end + 4 - start) - held;
    this.head(data.toString('latin1', start, end), buf, next);
    return next;
  }

  private head(text: string, buf: Buffer, next: number): void {
    if (BAD_HEAD.test(text)) return this.fail('control character or bare CR/LF in the response head');
    let eol = text.indexOf('\r\n');
    if (eol < 0) eol = text.length;
    // HTTP/1.x SP 3DIGIT [SP reason]
    const minor = text.charCodeAt(7) - 48;
    const d0 = text.charCodeAt(9) - 48;
    const d1 = text.charCodeAt(10) - 48;
    const d2 = text.charCodeAt(11) - 48;
    if (
      !text.startsWith('HTTP/1.') || (minor !== 0 && minor !== 1) || text.charCodeAt(8) !== 32 || eol < 12 || (eol > 12 && text.charCodeAt(12) !== 32) ||
      !(d0 >= 1 && d0 <= 5) || !(d1 >= 0 && d1 <= 9) || !(d2 >= 0 && d2 <= 9)
    ) return this.fail('malformed status line');
    const code = d0 * 100 + d1 * 10 + d2;
    const statusEnd = eol;
    if (code < 200 && code !== 101) return; // 100 Continue, 102, 103 Early Hints: the final head follows
    const headers: string[] = [];
    let contentLength = -1;
    let chunked = false;
    let close = minor === 0;
    let connection = '';
    let keepAliveTimeout = 0;
    let pos = eol + 2;
    while (pos < text.length) {
      eol = text.indexOf('\r\n', pos);
      if (eol < 0) eol = text.length;
      const colon = text.indexOf(':', pos);
      if (colon <= pos || colon > eol) return this.fail('malformed header line');
      const name = text.slice(pos, colon);
      if (!TOKEN.test(name)) return this.fail('malformed header name'); // also refuses obs-fold (a leading space)
      let a = colon + 1;
      let b = eol;
      while (a < b && (text.charCodeAt(a) === 32 || text.charCodeAt(a) === 9)) a++;
      while (b > a && (text.charCodeAt(b - 1) === 32 || text.charCodeAt(b - 1) === 9)) b--;
      const value = text.slice(a, b);
      headers.push(name, value);
      pos = eol + 2;
      const n = name.length;
      if (n !== 10 && n !== 14 && n !== 17) continue;
      const lower = name.toLowerCase();
      if (lower === 'content-length') {
        if (!DIGITS.test(value)) return this.fail('malformed Content-Length');
        const length = Number(value);
        if (contentLength >= 0 && contentLength !== length) return this.fail('conflicting Content-Length headers');
        contentLength = length;
      } else if (lower === 'transfer-encoding') {
        if (chunked || value.toLowerCase() !== 'chunked') return this.fail('unsupported Transfer-Encoding');
        chunked = true;
      } else if (lower === 'connection') {
        connection = connection ? `${connection}, ${value}` : value;
        const v = value.toLowerCase();
        if (v === 'keep-alive') close = minor === 0 ? false : close;
        else if (v === 'close') close = true;
        else {
          for (const token of v.split(',')) {
            const t = token.trim();
            if (t === 'close') close = true;
            else if (t === 'keep-alive' && minor === 0) close = false;
          }
        }
      } else if (lower === 'keep-alive') {
        const m = /(?:^|[,;\s])timeout\s*=\s*"?(\d+)/i.exec(value);
        if (m) keepAliveTimeout = Number(m[1]);
      }
    }
    if (chunked && contentLength >= 0) return this.fail('both Content-Length and Transfer-Encoding');
    const bodiless = this.noBody || code === 204 || code === 304 || code === 101;
    const untilClose = !bodiless && !chunked && contentLength < 0;
    this.sink.onHead({
      status: code, statusText: statusEnd > 13 ? text.slice(9, statusEnd) : `${code} `,
      headers, connection, latin1: NOT_ASCII.test(text), contentLength,
      chunked: chunked && !bodiless, keepAlive: !close && !untilClose && code !== 101, keepAliveTimeout,
    });
    if (this.state !== State.Head) return; // the sink gave up on this response
    if (bodiless || (!chunked && contentLength === 0)) return this.complete(rest(buf, next));
    if (chunked) this.nextChunk();
    else if (contentLength > 0) {
      this.state = State.Length;
      this.remaining = contentLength;
    } else this.state = State.UntilClose;
  }

  /** Reads one CRLF-terminated line (possibly across reads) and hands it over without its CRLF. */
  private readLine(buf: Buffer, pos: number, take: (line: string) => void): number {
    const lf = buf.indexOf(10, pos);
    const held = this.partial ? this.partial.length : 0;
    if (lf < 0) {
      if (held + buf.length - pos > MAX_LINE) this.fail('line too long');
      else this.partial = this.partial ? Buffer.concat([this.partial, buf.subarray(pos)]) : Buffer.from(buf.subarray(pos));
      return buf.length;
    }
    if (held + lf - pos > MAX_LINE) {
      this.fail('line too long');
      return buf.length;
    }
    let line = buf.toString('latin1', pos, lf);
    if (this.partial) {
      line = this.partial.toString('latin1') + line;
      this.partial = null;
    }
    if (!line.endsWith('\r')) {
      this.fail('line not ended by CRLF');
      return buf.length;
    }
    take(line.slice(0, -1));
    return lf + 1;
  }

  private nextChunk(): void {
    this.state = State.ChunkSize;
    this.size = 0;
    this.digits = 0;
    this.extension = 0;
  }

  /** Trailer fields are checked and dropped (the client's side has no way to send them); a blank line ends them. */
  private trailer(line: string): void {
    if (line === '') {
      this.state = State.Done;
      this.partial = null;
      return;
    }
    const colon = line.indexOf(':');
    if (colon <= 0 || !TOKEN.test(line.slice(0, colon)) || BAD_VALUE.test(line)) this.fail('malformed trailer');
  }
}

const rest = (buf: Buffer, pos: number): Buffer | null => (pos < buf.length ? buf.subarray(pos) : null);
