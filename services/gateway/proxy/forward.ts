// One proxied HTTP exchange: the request head written by the gateway itself onto a pooled keep-alive
// connection (upstream.ts), the client's body streamed after it, and the target's response read by a
// strict HTTP/1.1 reader (http1.ts) and streamed back, with backpressure both ways (the slower side
// pauses the faster one, so neither body is ever held whole) and every wait bounded.
import { bytesToClient, bytesToTarget } from '../metrics.js';
import type uWS from 'uWebSockets.js';
import { asHubError, errors, httpBody, statusLine, type HubError } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { errorPage, remoteAddressOf } from '../http.js';
import { BAD_TARGET, clientResponseHead, forwardRequestHead, headerValue } from './headers.js';
import { ResponseReader, type ResponseHead, type ResponseSink } from './http1.js';
import type { RouteEntry } from './table.js';
import { proxiedToken, type GateAnswer } from './token-gate.js';
import type { Upstream, UpstreamPool, UpstreamUser } from './upstream.js';
import { drain } from '../drain.js';

export interface ForwardOptions {
  log: Logger;
  /** the target could not be reached (refused, reset, timed out): the proxy-router is told */
  onUnreachable(entry: RouteEntry): void;
  /** judges a hub token the request carries (token-gate.ts): null forwards, an error is answered instead */
  gate(token: string, entry: RouteEntry): GateAnswer | Promise<GateAnswer>;
  /** a request is forwarded: its route's activity (a refused one is none) */
  touch(entry: RouteEntry): void;
}

/** Methods a request may be sent again for, when a reused connection turned out closed before any answer. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

/** An error of the gateway's own: a page for browsers, JSON for API clients. */
export function answerError(res: uWS.HttpResponse, err: HubError, browser: boolean): void {
  res.cork(() => {
    res.writeStatus(statusLine(err.status));
    if (drain.draining) res.writeHeader('Connection', 'close');
    if (browser) res.writeHeader('Content-Type', 'text/html; charset=utf-8').end(errorPage(err));
    else res.writeHeader('Content-Type', 'application/json').end(httpBody(err));
  });
}

/** Starts forwarding; must be called synchronously from the uWS handler (it reads `req`). */
export function forwardHttp(res: uWS.HttpResponse, req: uWS.HttpRequest, entry: RouteEntry, path: string, pool: UpstreamPool, opts: ForwardOptions): void {
  const method = req.getCaseSensitiveMethod().toUpperCase();
  const query = req.getQuery();
  const target = query ? `${entry.basePath}${path}?${query}` : entry.basePath + path;
  const head = forwardRequestHead(req, remoteAddressOf(res), entry.host, false);
  const browser = head.accept.includes('text/html');
  const refusal = head.invalid ?? (BAD_TARGET.test(target) ? 'the request target holds characters that cannot be forwarded' : null);
  if (refusal) return answerError(res, errors.badRequest(`Request not forwardable: ${refusal}`), browser);
  const token = proxiedToken(head.authorization, query);
  const verdict = token ? opts.gate(token, entry) : null;
  if (verdict && !(verdict instanceof Promise)) return answerError(res, verdict, browser);
  const exchange = new Exchange(res, entry, method, browser, pool, opts, `${method} ${target} HTTP/1.1\r\n${head.lines}\r\n`, head.hasBody, head.chunked);
  if (!verdict) {
    opts.touch(entry);
    return exchange.start();
  }
  // a token memory knows nothing of: the body (if any) waits, paused, for the tokens actor's answer
  exchange.listen();
  verdict.then((refused) => {
    if (refused) return exchange.refuse(refused);
    opts.touch(entry);
    exchange.connect();
  }, (e) => exchange.refuse(asHubError(e)));
}

class Exchange implements UpstreamUser, ResponseSink {
  private conn: Upstream | null = null;
  private readonly reader = new ResponseReader(this);
  private aborted = false;
  /** the client's response is complete (or cut off): no more writes */
  private finished = false;
  private head: ResponseHead | null = null;
  private headWritten = false;
  private headers: string[] = [];
  /** declared length of the target's body: streamed with tryEnd; undefined: chunked with write */
  private total: number | undefined;
  private noBody = false;
  /** body bytes read in the current turn, written to the client once the read is consumed */
  private pending: Buffer[] = [];
  /** the target's whole response was read */
  private upstreamDone = false;
  /** a chunk tryEnd could not take whole, and the write offset it started at */
  private stash: Buffer | null = null;
  private stashOffset = 0;
  /** the whole request (head and body) went to the target */
  private requestSent = false;
  /** the client's body that came before a connection did */
  private early: Buffer[] | null = null;
  private earlyLast = false;
  /** the client's body is paused waiting for the target to drain */
  private clientPaused = false;
  /** the connection had carried a request before this one */
  private reused = false;
  private retried = false;
  private watchingWritable = false;

  constructor(
    private readonly res: uWS.HttpResponse,
    private readonly entry: RouteEntry,
    private readonly method: string,
    private readonly browser: boolean,
    private readonly pool: UpstreamPool,
    private readonly opts: ForwardOptions,
    private readonly requestHead: string,
    private readonly withBody: boolean,
    private readonly chunked: boolean,
  ) {
    res.onAborted(() => this.clientGone());
    drain.begin();
  }

  /** counted in flight from its start until the client has its answer, or is gone (drain.ts) */
  private settled = false;
  private settle(): void {
    if (this.settled) return;
    this.settled = true;
    drain.end();
  }

  start(): void {
    this.listen();
    this.connect();
  }

  /** Takes the client's body from now on (uWS wants this before its handler returns); kept until a connection. */
  listen(): void {
    if (this.withBody) this.res.onData((chunk, isLast) => this.clientData(chunk, isLast));
  }

  connect(): void {
    if (this.aborted || this.finished) return;
    this.reader.start(this.method);
    this.pool.acquire(this.entry, this);
  }

  /** Answered by the gateway instead (a token refused at the door): nothing reaches the target. */
  refuse(err: HubError): void {
    this.answerError(err);
  }

  // ---- the request ----

  attach(conn: Upstream): void {
    if (this.aborted || this.finished) return conn.release(true);
    this.conn = conn;
    this.reused = conn.uses > 0;
    conn.write(this.requestHead);
    if (!this.withBody) this.requestSent = true;
    else if (this.early) {
      const early = this.early;
      this.early = null;
      for (let i = 0; i < early.length; i++) this.writeBody(early[i], this.earlyLast && i === early.length - 1);
      if (!early.length && this.earlyLast) this.writeBody(Buffer.alloc(0), true);
      if (this.clientPaused && conn.socket.writableLength === 0) this.resumeClient();
      else if (this.clientPaused) conn.socket.once('drain', () => this.resumeClient());
    }
  }

  /** The client's body; uWS reuses the chunk's memory after this callback, so it is copied. */
  private clientData(chunk: ArrayBuffer, isLast: boolean): void {
    if (this.finished || this.aborted || this.upstreamDone) return;
    const copy = Buffer.from(new Uint8Array(chunk));
    if (!this.conn) {
      // no connection yet: kept (bounded: the client is paused until there is one)
      (this.early ??= []).push(copy);
      this.earlyLast = isLast;
      if (!isLast && !this.clientPaused) {
        this.clientPaused = true;
        this.res.pause();
      }
      return;
    }
    this.writeBody(copy, isLast);
  }

  private writeBody(data: Buffer, isLast: boolean): void {
    const conn = this.conn!;
    bytesToTarget.inc(data.length);
    let ok = true;
    if (this.chunked) {
      conn.socket.cork();
      if (data.length) {
        conn.write(`${data.length.toString(16)}\r\n`);
        conn.write(data);
        conn.write('\r\n');
      }
      if (isLast) conn.write('0\r\n\r\n');
      conn.socket.uncork();
      ok = !conn.socket.writableNeedDrain;
    } else if (data.length) ok = conn.write(data);
    if (isLast) this.requestSent = true;
    else if (!ok && !this.clientPaused) {
      this.clientPaused = true;
      this.res.pause();
      conn.socket.once('drain', () => { if (this.conn === conn) this.resumeClient(); });
    }
  }

  // ---- the response ----

  onData(buf: Buffer): void {
    this.reader.push(buf);
    this.flush();
  }

  onHead(head: ResponseHead): void {
    if (head.status === 101) return void this.badResponse('101 Switching Protocols to a request without Upgrade');
    if (this.aborted || this.finished) return;
    this.head = head;
    this.headers = clientResponseHead(head.headers, head.connection);
    this.noBody = this.method === 'HEAD' || head.status === 204 || head.status === 304;
    this.total = head.chunked || head.contentLength < 0 ? undefined : head.contentLength;
    if (head.keepAliveTimeout && this.conn) this.conn.keepAliveMs = Math.min(this.pool.keepAliveMs, head.keepAliveTimeout * 1000 - 1000);
  }

  onBody(chunk: Buffer): void {
    this.pending.push(chunk);
  }

  onComplete(rest: Buffer | null): void {
    this.upstreamDone = true;
    const conn = this.conn;
    this.conn = null;
    // bytes after the response, or a request body not all sent: the connection's state is unknown
    conn?.release(this.head!.keepAlive && !rest && this.requestSent && !this.aborted);
  }

  onError(why: string): void {
    if (this.head) return this.cutOff(why);
    this.badResponse(why);
  }

  /** Writes what the last read produced: the head, body bytes, the end. Runs before the read buffer is reused. */
  private flush(): void {
    const pending = this.pending;
    if (pending.length) this.pending = [];
    if (this.finished || this.aborted || !this.head) return;
    if (this.noBody) {
      if (!this.upstreamDone) return;
      const length = this.head.contentLength;
      return this.finish(() => { this.writeHead(); this.res.endWithoutBody(length >= 0 ? length : undefined); });
    }
    const data = pending.length === 0 ? null : pending.length === 1 ? pending[0] : Buffer.concat(pending);
    if (data) bytesToClient.inc(data.length);
    if (this.total !== undefined) {
      if (data) return this.writeLength(data);
      if (this.total === 0 && this.upstreamDone) return this.finish(() => { this.writeHead(); this.res.end(); });
    } else if (this.upstreamDone) {
      // a chunked answer read whole in one go leaves as one write with a Content-Length
      return this.finish(() => { this.writeHead(); this.res.end(data ?? undefined); });
    } else if (data) {
      let ok = true;
      this.res.cork(() => { this.writeHead(); ok = this.res.write(data); });
      if (!ok) this.backpressure();
      return;
    }
    // the head alone so far (a stream that has not started): the client sees it at once
    if (!this.headWritten) this.res.cork(() => this.writeHead());
  }

  private writeHead(): void {
    if (this.headWritten) return;
    this.headWritten = true;
    this.res.writeStatus(this.head!.statusText);
    if (drain.draining) this.res.writeHeader('Connection', 'close'); // the client's next request goes to the successor
    const h = this.headers;
    if (this.head!.latin1) for (let i = 0; i < h.length; i += 2) this.res.writeHeader(h[i], headerValue(h[i + 1]));
    else for (let i = 0; i < h.length; i += 2) this.res.writeHeader(h[i], h[i + 1]);
  }

  private writeLength(data: Buffer): void {
    const total = this.total!;
    let ok = true;
    this.res.cork(() => {
      this.writeHead();
      const offset = this.res.getWriteOffset();
      if (offset + data.length >= total) this.beforeLastWrite();
      const [sent, done] = this.res.tryEnd(data, total);
      if (done) this.completed();
      else if (!sent) {
        this.stash = Buffer.from(data); // a copy: the read buffer is reused
        this.stashOffset = offset;
        ok = false;
      }
    });
    if (!ok) this.backpressure();
  }

  /** The client is not taking the body as fast as the target sends it: the target waits until uWS says it is writable. */
  private backpressure(): void {
    this.conn?.socket.pause();
    if (this.watchingWritable) return;
    this.watchingWritable = true; // registered only now: most responses never need it
    this.res.onWritable((offset) => this.onWritable(offset));
  }

  private onWritable(offset: number): boolean {
    if (this.finished || this.aborted) return true;
    if (this.total === undefined) {
      this.conn?.socket.resume();
      return true;
    }
    if (!this.stash) return true;
    this.beforeLastWrite();
    const [sent, done] = this.res.tryEnd(this.stash.subarray(offset - this.stashOffset), this.total);
    if (done) this.completed();
    else if (sent) {
      this.stash = null;
      this.conn?.socket.resume();
    }
    return sent;
  }

  // ---- endings ----

  /** The target ended its side: the end of a body that runs to it, or a cut-off. */
  onEnd(): void {
    this.conn = null;
    if (this.aborted || this.finished) return;
    if (this.retryable()) return this.retry();
    if (this.reader.received === 0) return this.unreachable('ECONNRESET');
    this.reader.eof();
    this.flush();
  }

  onFailure(err: NodeJS.ErrnoException): void {
    this.conn = null;
    if (this.aborted || this.finished) return;
    if (this.head) return this.cutOff(err.code ?? err.message);
    this.reader.abandon();
    if (this.retryable()) return this.retry();
    const routespec = this.entry.route.routespec;
    if (err.code === 'HUB_IDLE_TIMEOUT') {
      this.opts.log.warn({ event: 'proxy.target_timeout', routespec }, 'target did not answer in time');
      return this.answerError(errors.timeout(`The server at ${routespec}`));
    }
    this.unreachable(err.code);
  }

  /** A reused connection the target closed just as it was reused fails before any answer: a bodiless idempotent request is sent again, once. */
  private retryable(): boolean {
    return this.reused && !this.retried && this.reader.received === 0 && !this.withBody && IDEMPOTENT.has(this.method);
  }

  private retry(): void {
    this.retried = true;
    this.reused = false;
    this.reader.start(this.method);
    this.pool.acquire(this.entry, this, { fresh: true });
  }

  private unreachable(code: string | undefined): void {
    this.reader.abandon();
    this.opts.log.warn({ event: 'proxy.target_unreachable', routespec: this.entry.route.routespec, target: this.entry.route.target, code }, 'target not reachable');
    this.opts.onUnreachable(this.entry);
    this.answerError(errors.unavailable(`The server at ${this.entry.route.routespec}`));
  }

  private badResponse(why: string): void {
    this.reader.abandon();
    this.opts.log.warn({ event: 'proxy.bad_response', routespec: this.entry.route.routespec, why }, 'target sent an invalid response');
    this.answerError(errors.badGateway(`The server at ${this.entry.route.routespec}`));
  }

  private finish(write: () => void): void {
    if (this.finished || this.aborted) return;
    this.beforeLastWrite();
    this.res.cork(write);
    this.completed();
  }

  /** A paused client must be resumed before its response ends, or its connection stays paused for the next request. */
  private beforeLastWrite(): void {
    if (this.clientPaused) this.resumeClient();
  }

  private resumeClient(): void {
    if (!this.clientPaused || this.finished || this.aborted) return;
    this.clientPaused = false;
    this.res.resume();
  }

  /** The client has its whole response. A target that answered before reading the whole body gets no more of it. */
  private completed(): void {
    this.finished = true;
    this.settle();
    this.early = null;
    if (this.conn) {
      this.reader.abandon();
      this.conn.destroy();
      this.conn = null;
    }
  }

  /** The target failed mid-response: the client must see a broken response, not a complete-looking one. */
  private cutOff(why: string): void {
    if (this.finished || this.aborted) return;
    this.opts.log.warn({ event: 'proxy.response_cut', routespec: this.entry.route.routespec, why }, 'response from target cut off');
    this.finished = true;
    this.settle();
    this.reader.abandon();
    this.conn?.destroy();
    this.conn = null;
    this.res.close();
  }

  /** An error before any of the target's response was sent. */
  private answerError(err: HubError): void {
    if (this.finished || this.aborted) return;
    this.beforeLastWrite();
    answerError(this.res, err, this.browser);
    this.completed();
  }

  private clientGone(): void {
    this.aborted = true;
    this.settle();
    this.reader.abandon();
    this.early = null;
    if (this.conn) this.conn.destroy();
    else if (!this.upstreamDone) this.pool.cancel(this.entry, this);
    this.conn = null;
  }
}
