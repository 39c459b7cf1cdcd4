// One proxied HTTP exchange: the client's request streamed to the target through a pooled
// keep-alive connection, and the target's response streamed back, with backpressure both ways
// (the slower side pauses the faster one, so neither body is ever held whole) and every wait bounded.
import http from 'node:http';
import https from 'node:https';
import type uWS from 'uWebSockets.js';
import { errors, httpBody, statusLine, type HubError } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { cap } from '../../../shared/log.js';
import { errorPage } from '../http.js';
import { bytesToClient, bytesToTarget, proxyInflight, proxyRequests } from '../metrics.js';
import { clientResponseHead, forwardRequestHead, headerValue } from './headers.js';
import type { RouteEntry } from './table.js';

export interface ForwardOptions {
  connectTimeoutMs: number;
  /** longest silence from the target, before or during its response */
  idleTimeoutMs: number;
  /** idle pooled connections close after this (Proxy.keepalive_timeout) */
  keepAliveTimeoutMs: number;
  log: Logger;
  /** the target could not be reached (refused, reset, timed out): the proxy-router is told */
  onUnreachable(entry: RouteEntry): void;
}

/** Upstream connections: kept alive and reused, bounded per target and in total. */
export function createAgents(keepAliveTimeoutMs: number) {
  const options = {
    keepAlive: true,
    maxSockets: 256,
    maxTotalSockets: 2048,
    maxFreeSockets: 64,
    // Idle pooled connections are closed before a target's own keep-alive timeout (node's default is 5 s)
    // would close them under a request in flight.
    timeout: keepAliveTimeoutMs,
    scheduling: 'lifo' as const,
  };
  return { http: new http.Agent(options), https: new https.Agent(options) };
}

export type Agents = ReturnType<typeof createAgents>;

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS']);

/** How a forwarded request ended (hub_proxy_requests_total), children made once. */
const OUTCOME = {
  completed: proxyRequests.child('completed'), cut: proxyRequests.child('cut'), unreachable: proxyRequests.child('unreachable'),
  timeout: proxyRequests.child('timeout'), aborted: proxyRequests.child('aborted'), refused: proxyRequests.child('refused'),
};

export function remoteAddressOf(res: uWS.HttpResponse): string {
  return Buffer.from(res.getRemoteAddressAsText()).toString();
}

/** An error of the gateway's own: a page for browsers, JSON for API clients. */
export function answerError(res: uWS.HttpResponse, err: HubError, browser: boolean): void {
  res.cork(() => {
    res.writeStatus(statusLine(err.status));
    if (browser) res.writeHeader('Content-Type', 'text/html; charset=utf-8').end(errorPage(err));
    else res.writeHeader('Content-Type', 'application/json').end(httpBody(err));
  });
}

/** Starts forwarding; must be called synchronously from the uWS handler (it reads `req`). */
export function forwardHttp(res: uWS.HttpResponse, req: uWS.HttpRequest, entry: RouteEntry, path: string, agents: Agents, opts: ForwardOptions): void {
  const method = req.getCaseSensitiveMethod().toUpperCase();
  const query = req.getQuery();
  const head = forwardRequestHead(req, remoteAddressOf(res), false);
  const browser = req.getHeader('accept').includes('text/html');
  new Exchange(res, entry, method, browser, agents, opts).start(query ? `${path}?${query}` : path, head.headers, head.hasBody);
}

class Exchange {
  private upReq: http.ClientRequest | undefined;
  private upRes: http.IncomingMessage | undefined;
  private aborted = false;
  /** the client's response is complete (or cut off): no more writes */
  private finished = false;
  private headWritten = false;
  private status = '';
  private headers: string[] = [];
  /** declared length of the target's body: streamed with tryEnd; undefined: chunked with write */
  private total: number | undefined;
  /** the first chunk of a chunked answer, not written yet (see send) */
  private held: Buffer | null = null;
  private firstChunk = true;
  /** a chunk tryEnd could not take whole, and the write offset it started at */
  private stash: Buffer | null = null;
  private stashOffset = 0;
  private upstreamEnded = false;
  /** the client's body is paused waiting for the target to drain */
  private clientPaused = false;
  private retried = false;
  private connectTimer: NodeJS.Timeout | undefined;
  /** counted as ended (in-flight gauge down, outcome counter up) */
  private counted = false;

  constructor(
    private readonly res: uWS.HttpResponse,
    private readonly entry: RouteEntry,
    private readonly method: string,
    private readonly browser: boolean,
    private readonly agents: Agents,
    private readonly opts: ForwardOptions,
  ) {
    res.onAborted(() => this.clientGone());
    proxyInflight.inc();
  }

  private count(outcome: keyof typeof OUTCOME): void {
    if (this.counted) return;
    this.counted = true;
    proxyInflight.dec();
    OUTCOME[outcome].inc();
  }

  start(path: string, headers: string[], withBody: boolean): void {
    try {
      this.upReq = this.request(path, headers);
    } catch (e) {
      // node refuses characters a request line or header may not carry
      this.count('refused');
      this.answerError(errors.badRequest(`Request not forwardable: ${cap((e as Error).message, 100)}`));
      return;
    }
    if (withBody) this.streamBody(this.upReq);
    else this.upReq.end();
    if (!withBody && IDEMPOTENT.has(this.method)) this.allowRetry(path, headers);
  }

  private request(path: string, headers: string[]): http.ClientRequest {
    const { entry, opts } = this;
    const mod = entry.protocol === 'https:' ? https : http;
    const upReq = mod.request({
      host: entry.hostname, port: entry.port, method: this.method, path: entry.basePath + path, headers, setHost: false,
      agent: entry.protocol === 'https:' ? this.agents.https : this.agents.http,
    });
    this.connectTimer = setTimeout(() => upReq.destroy(Object.assign(new Error('connect timeout'), { code: 'HUB_CONNECT_TIMEOUT' })), opts.connectTimeoutMs);
    upReq.on('socket', (s) => {
      if (!s.connecting) return clearTimeout(this.connectTimer);
      s.once('connect', () => clearTimeout(this.connectTimer));
    });
    upReq.setTimeout(opts.idleTimeoutMs, () => upReq.destroy(Object.assign(new Error('idle timeout'), { code: 'HUB_IDLE_TIMEOUT' })));
    // only the current attempt speaks (a retried request is replaced)
    upReq.on('response', (r) => { if (upReq === this.upReq) this.onResponse(r); });
    upReq.on('error', (e) => { if (upReq === this.upReq) this.onUpstreamError(e as NodeJS.ErrnoException); });
    return upReq;
  }

  /** A pooled connection the target closed just as it was reused fails at once: a bodiless idempotent request is sent again, once. */
  private allowRetry(path: string, headers: string[]): void {
    const first = this.upReq!;
    first.prependOnceListener('error', (e: NodeJS.ErrnoException) => {
      if (this.retried || this.aborted || this.upRes || !first.reusedSocket || e.code !== 'ECONNRESET') return;
      this.retried = true;
      clearTimeout(this.connectTimer);
      this.upReq = this.request(path, headers);
      this.upReq.end();
    });
  }

  /** The client's body to the target; the client is paused while the target is not taking it. */
  private streamBody(upReq: http.ClientRequest): void {
    const { res } = this;
    res.onData((chunk, isLast) => {
      if (this.finished || this.aborted || upReq.destroyed) return;
      bytesToTarget.inc(chunk.byteLength);
      // uWS reuses the chunk's memory after this callback: copy it
      if (chunk.byteLength && !upReq.write(Buffer.from(new Uint8Array(chunk))) && !isLast) {
        res.pause();
        this.clientPaused = true;
        upReq.once('drain', () => this.resumeClient());
      }
      if (isLast) upReq.end();
    });
  }

  private onResponse(upRes: http.IncomingMessage): void {
    clearTimeout(this.connectTimer);
    this.upRes = upRes;
    if (this.aborted) return void upRes.destroy();
    const head = clientResponseHead(upRes.rawHeaders);
    this.status = `${upRes.statusCode} ${upRes.statusMessage ?? ''}`.trim();
    this.headers = head.headers;
    const code = upRes.statusCode ?? 502;
    if (this.method === 'HEAD' || code === 204 || code === 304) {
      upRes.resume();
      this.finish(() => { this.writeHead(); this.res.endWithoutBody(head.contentLength); });
      return;
    }
    this.total = head.contentLength;
    this.res.onWritable((offset) => this.onWritable(offset));
    upRes.on('data', (chunk: Buffer) => this.send(chunk));
    upRes.on('end', () => this.onUpstreamEnd());
    upRes.on('error', () => this.cutOff('response interrupted'));
    upRes.on('close', () => { if (!upRes.complete) this.cutOff('response interrupted'); });
  }

  private writeHead(): void {
    if (this.headWritten) return;
    this.headWritten = true;
    this.res.writeStatus(this.status);
    const h = this.headers;
    for (let i = 0; i < h.length; i += 2) this.res.writeHeader(h[i], headerValue(h[i + 1]));
  }

  /** One chunk of the target's body; on backpressure the target is paused until uWS says the client is writable. */
  private send(chunk: Buffer): void {
    if (this.finished || this.aborted) return;
    bytesToClient.inc(chunk.length);
    if (this.firstChunk && this.total === undefined) {
      // A small chunked answer usually ends right after its first chunk: held until the next turn of the
      // loop, it can go out as one write with a Content-Length instead of two writes on chunked framing.
      this.firstChunk = false;
      this.held = chunk;
      setImmediate(() => this.releaseHeld());
      return;
    }
    this.releaseHeld();
    this.write(chunk);
  }

  private releaseHeld(): void {
    const chunk = this.held;
    if (!chunk || this.finished || this.aborted) return;
    this.held = null;
    this.write(chunk);
  }

  private write(chunk: Buffer): void {
    let ok = true;
    this.res.cork(() => {
      this.writeHead();
      if (this.total === undefined) {
        ok = this.res.write(chunk);
        return;
      }
      const offset = this.res.getWriteOffset();
      if (offset + chunk.length >= this.total) this.beforeLastWrite();
      const [sent, done] = this.res.tryEnd(chunk, this.total);
      if (done) this.completed();
      else if (!sent) {
        this.stash = chunk;
        this.stashOffset = offset;
        ok = false;
      }
    });
    if (!ok) this.upRes!.pause();
  }

  private onWritable(offset: number): boolean {
    if (this.finished || this.aborted) return true;
    if (this.total === undefined) {
      this.upRes!.resume();
      return true;
    }
    if (!this.stash) return true;
    this.beforeLastWrite();
    const [sent, done] = this.res.tryEnd(this.stash.subarray(offset - this.stashOffset), this.total);
    if (done) this.completed();
    else if (sent) {
      this.stash = null;
      if (this.upstreamEnded) this.cutOff('response shorter than declared');
      else this.upRes!.resume();
    }
    return sent;
  }

  private onUpstreamEnd(): void {
    this.upstreamEnded = true;
    if (this.finished || this.aborted) return;
    if (this.total === undefined) {
      const last = this.held;
      this.held = null;
      return this.finish(() => { this.writeHead(); this.res.end(last ?? undefined); });
    }
    if (this.total === 0) return this.finish(() => { this.writeHead(); this.res.end(); });
    // a chunk still waiting for the client finishes the response from onWritable
    if (!this.stash) this.cutOff('response shorter than declared');
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
    this.count('completed');
    this.finished = true;
    if (this.upReq && !this.upReq.writableEnded) this.upReq.destroy();
  }

  /** The target failed mid-response: the client must see a broken response, not a complete-looking one. */
  private cutOff(why: string): void {
    if (this.finished || this.aborted) return;
    this.opts.log.warn({ event: 'proxy.response_cut', routespec: this.entry.route.routespec, why }, 'response from target cut off');
    this.count('cut');
    this.finished = true;
    this.res.close();
  }

  private onUpstreamError(e: NodeJS.ErrnoException): void {
    clearTimeout(this.connectTimer);
    if (this.aborted || this.finished) return;
    if (this.upRes) return this.cutOff(e.code ?? e.message);
    const routespec = this.entry.route.routespec;
    if (e.code === 'HUB_IDLE_TIMEOUT') {
      this.opts.log.warn({ event: 'proxy.target_timeout', routespec }, 'target did not answer in time');
      this.count('timeout');
      return this.answerError(errors.timeout(`The server at ${routespec}`));
    }
    this.opts.log.warn({ event: 'proxy.target_unreachable', routespec, target: this.entry.route.target, code: e.code }, 'target not reachable');
    this.opts.onUnreachable(this.entry);
    this.count('unreachable');
    this.answerError(errors.unavailable(`The server at ${routespec}`));
  }

  /** An error before any of the target's response was sent. */
  private answerError(err: HubError): void {
    if (this.finished || this.aborted) return;
    this.beforeLastWrite();
    answerError(this.res, err, this.browser);
    this.completed();
  }

  private clientGone(): void {
    this.count('aborted');
    this.aborted = true;
    clearTimeout(this.connectTimer);
    this.upReq?.destroy();
  }
}
