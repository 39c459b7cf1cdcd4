// WebSocket proxying. uWS accepts the client's upgrade only after the target accepted the gateway's
// own upgrade request (so the target authorizes it exactly as it would an HTTP request, and a refusal
// reaches the client as the target's HTTP answer). Then messages, pings, pongs and close codes pass
// both ways; a slow client pauses the target's socket.
import { createHash, randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import uWS from 'uWebSockets.js';
import { asHubError, errors, type HubError } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { remoteAddressOf } from '../http.js';
import { answerError } from './forward.js';
import { BAD_TARGET, clientResponseHead, forwardRequestHead, headerValue } from './headers.js';
import { ResponseReader, type ResponseHead, type ResponseSink } from './http1.js';
import { openSocket } from './upstream.js';
import type { RouteEntry } from './table.js';
import { proxiedToken, type GateAnswer } from './token-gate.js';
import { bytesToClient, bytesToTarget, webSockets } from '../metrics.js';
import { closePayload, encodeFrame, FrameReader, OP } from './ws-frames.js';
import { drain } from '../drain.js';

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/** Largest message either way (the target's WebSocket servers typically allow 10 MiB). */
export const WS_MAX_MESSAGE = 64 * 1024 * 1024;
/** Bytes queued towards the client before the target's socket is paused, and resumed below. */
const CLIENT_HIGH_WATER = 1024 * 1024;
const CLIENT_LOW_WATER = 256 * 1024;
/** uWS cannot pause a client's reads: past this much queued towards the target, the client is closed (1013). */
const TARGET_QUEUE_LIMIT = 2 * WS_MAX_MESSAGE;
/** How long a closing handshake with the target may take before its socket is destroyed. */
const CLOSE_GRACE_MS = 5000;

export interface Bridge {
  entry: RouteEntry;
  socket: Socket;
  /** where the target's bytes go (views of a shared read buffer: copied if kept) */
  input: { data(buf: Buffer): void };
  /** bytes the target sent after its 101, before the client's socket opened */
  head: Buffer;
  /** the client's side may still be written to (false once uWS called close, or we ended it) */
  clientOpen: boolean;
  /** set once either side started closing */
  closing: boolean;
}

export interface WebSocketOptions {
  connectTimeoutMs: number;
  log: Logger;
  /** the route for an upgrade request, or null to let the HTTP handler answer it */
  routeFor(req: uWS.HttpRequest): { entry: RouteEntry; path: string } | null;
  touch(entry: RouteEntry): void;
  onUnreachable(entry: RouteEntry): void;
  /** judges a hub token the upgrade carries (token-gate.ts): null forwards, an error is answered instead */
  gate(token: string, entry: RouteEntry): GateAnswer | Promise<GateAnswer>;
}

export function webSocketBehavior(opts: WebSocketOptions): uWS.WebSocketBehavior<Bridge> {
  return {
    maxPayloadLength: WS_MAX_MESSAGE,
    // a whole message must always fit; the target is paused long before this is reached
    maxBackpressure: WS_MAX_MESSAGE + 2 * CLIENT_HIGH_WATER,
    closeOnBackpressureLimit: 0, // typed as a number by uWS: "false"
    idleTimeout: 120,
    sendPingsAutomatically: true,
    compression: uWS.DISABLED,
    upgrade: (res, req, context) => upgrade(res, req, context, opts),
    open: (ws) => {
      webSockets.inc();
      drain.opened();
      open(ws, opts);
    },
    message: (ws, message, isBinary) => toTarget(ws, isBinary ? OP.binary : OP.text, message, opts),
    ping: (ws, message) => toTarget(ws, OP.ping, message, opts),
    pong: (ws, message) => toTarget(ws, OP.pong, message, opts),
    drain: (ws) => {
      if (ws.getBufferedAmount() < CLIENT_LOW_WATER) ws.getUserData().socket.resume();
    },
    close: (ws, code, message) => {
      webSockets.dec();
      drain.closed();
      clientClosed(ws.getUserData(), code, message);
    },
  };
}

function upgrade(res: uWS.HttpResponse, req: uWS.HttpRequest, context: uWS.us_socket_context_t, opts: WebSocketOptions): void {
  const found = opts.routeFor(req);
  if (!found) return void req.setYield(true); // not a proxied path: the HTTP handler answers
  const { entry, path } = found;
  const clientKey = req.getHeader('sec-websocket-key');
  const query = req.getQuery();
  const target = query ? `${entry.basePath}${path}?${query}` : entry.basePath + path;
  const head = forwardRequestHead(req, remoteAddressOf(res), entry.host, true);
  const browser = head.accept.includes('text/html');
  const refusal = head.invalid ?? (BAD_TARGET.test(target) ? 'the request target holds characters that cannot be forwarded' : null);
  if (refusal) return void answerError(res, errors.badRequest(`Request not forwardable: ${refusal}`), browser);
  const token = proxiedToken(head.authorization, query);
  const verdict = token ? opts.gate(token, entry) : null;
  if (verdict && !(verdict instanceof Promise)) return void answerError(res, verdict, browser);
  const key = randomBytes(16).toString('base64');
  const requestHead = `GET ${target} HTTP/1.1\r\n${head.lines}connection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: ${key}\r\n\r\n`;
  const handshake = new Handshake(res, context, entry, clientKey, key, browser, opts);
  if (!verdict) return handshake.start(requestHead);
  verdict.then((refused) => (refused ? handshake.refuse(refused) : handshake.start(requestHead)), (e) => handshake.refuse(asHubError(e)));
}

/**
 * The gateway's own upgrade request to the target, on a fresh connection that is never pooled. The
 * target's 101 makes uWS upgrade the client; any other answer (such answers are small: the body is
 * capped) is relayed to the client as it is. The first outcome answers the client, within the connect timeout.
 */
class Handshake implements ResponseSink {
  private static readonly REFUSAL_LIMIT = 64 * 1024;
  private readonly reader = new ResponseReader(this);
  private socket: Socket | undefined;
  private head: ResponseHead | null = null;
  private body: Buffer[] = [];
  private bodySize = 0;
  private settled = false;
  private timer: NodeJS.Timeout | undefined;
  /** the target's bytes: to the response reader until the 101, to the bridge after it */
  private readonly input = { data: (d: Buffer) => this.reader.push(d) };
  private readonly listeners = {
    end: () => this.onEnd(),
    error: (e: NodeJS.ErrnoException) => this.unreachable(e.code),
    close: () => this.unreachable('ECONNRESET'),
  };

  constructor(
    private readonly res: uWS.HttpResponse,
    private readonly context: uWS.us_socket_context_t,
    private readonly entry: RouteEntry,
    private readonly clientKey: string,
    private readonly key: string,
    private readonly browser: boolean,
    private readonly opts: WebSocketOptions,
  ) {
    res.onAborted(() => {
      this.settled = true;
      this.done();
      this.socket?.destroy();
    });
  }

  start(requestHead: string): void {
    if (this.settled) return; // the client left while its token was being judged
    const socket = (this.socket = openSocket(this.entry, (d) => this.input.data(d)));
    for (const [event, f] of Object.entries(this.listeners)) socket.on(event, f);
    this.timer = setTimeout(() => this.unreachable('HUB_HANDSHAKE_TIMEOUT'), this.opts.connectTimeoutMs);
    this.reader.start('GET');
    socket.write(requestHead);
  }

  /** Answered by the gateway instead (a token refused at the door): the target is never asked. */
  refuse(err: HubError): void {
    if (this.settle()) answerError(this.res, err, this.browser);
  }

  /** True once: the one outcome that answers the client. */
  private settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    this.done();
    return true;
  }

  private done(): void {
    clearTimeout(this.timer);
    this.reader.abandon();
    if (this.socket) for (const [event, f] of Object.entries(this.listeners)) this.socket.removeListener(event, f);
    this.socket?.on('error', () => undefined); // late errors of a socket being destroyed or handed over
  }

  onHead(head: ResponseHead): void {
    this.head = head;
  }

  onBody(chunk: Buffer): void {
    if (this.bodySize < Handshake.REFUSAL_LIMIT) this.body.push(Buffer.from(chunk)); // a copy: the read buffer is reused
    this.bodySize += chunk.length;
  }

  onComplete(rest: Buffer | null): void {
    const head = this.head!;
    const socket = this.socket!;
    if (!this.settle()) return void socket.destroy();
    if (head.status !== 101) return this.relayRefusal(head);
    if (headerOf(head, 'sec-websocket-accept') !== createHash('sha1').update(this.key + WS_GUID).digest('base64') || headerOf(head, 'upgrade')?.toLowerCase() !== 'websocket') {
      socket.destroy();
      this.opts.log.warn({ event: 'proxy.ws.bad_handshake', routespec: this.entry.route.routespec }, 'target answered the upgrade wrongly');
      return void answerError(this.res, errors.unavailable(`The server at ${this.entry.route.routespec}`), this.browser);
    }
    socket.pause(); // until the client's side is open
    socket.setTimeout(0);
    this.opts.touch(this.entry);
    // bytes after the 101 are copied: the read buffer is reused
    const bridge: Bridge = { entry: this.entry, socket, input: this.input, head: rest ? Buffer.from(rest) : Buffer.alloc(0), clientOpen: true, closing: false };
    this.input.data = () => undefined; // paused until the client's side is open
    const protocol = headerOf(head, 'sec-websocket-protocol') ?? '';
    this.res.cork(() => this.res.upgrade(bridge, this.clientKey, protocol, '', this.context));
  }

  /** The target refused the upgrade (e.g. 403 from its own authorization): the client gets that answer. */
  private relayRefusal(head: ResponseHead): void {
    this.socket!.destroy();
    const headers = clientResponseHead(head.headers, head.connection);
    const body = Buffer.concat(this.body).subarray(0, Handshake.REFUSAL_LIMIT);
    this.res.cork(() => {
      this.res.writeStatus(head.statusText);
      for (let i = 0; i < headers.length; i += 2) this.res.writeHeader(headers[i], headerValue(headers[i + 1]));
      this.res.end(body);
    });
  }

  onError(why: string, beforeHead: boolean): void {
    if (!this.settle()) return;
    this.socket!.destroy();
    if (!beforeHead) return void this.res.close(); // a refusal cut off mid-body
    this.opts.log.warn({ event: 'proxy.bad_response', routespec: this.entry.route.routespec, why, websocket: true }, 'target sent an invalid response');
    answerError(this.res, errors.badGateway(`The server at ${this.entry.route.routespec}`), this.browser);
  }

  private onEnd(): void {
    this.reader.eof(); // completes a refusal whose body runs to the end of the connection
    this.unreachable('ECONNRESET');
  }

  private unreachable(code: string | undefined): void {
    if (!this.settle()) return;
    this.socket?.destroy();
    const routespec = this.entry.route.routespec;
    this.opts.log.warn({ event: 'proxy.target_unreachable', routespec, code, websocket: true }, 'target not reachable');
    this.opts.onUnreachable(this.entry);
    answerError(this.res, errors.unavailable(`The server at ${routespec}`), this.browser);
  }
}

function headerOf(head: ResponseHead, name: string): string | undefined {
  const h = head.headers;
  for (let i = 0; i < h.length; i += 2) if (h[i].length === name.length && h[i].toLowerCase() === name) return h[i + 1];
  return undefined;
}

/** The client is connected: target → client from now on. */
function open(ws: uWS.WebSocket<Bridge>, opts: WebSocketOptions): void {
  const bridge = ws.getUserData();
  const { socket, entry } = bridge;
  const reader = new FrameReader(WS_MAX_MESSAGE, {
    message: (data, binary) => {
      if (!bridge.clientOpen) return;
      opts.touch(entry);
      bytesToClient.inc(data.length);
      // 1: sent without backpressure, so nothing is queued: no second call into uWS to ask
      if (ws.send(data, binary) !== 1 && ws.getBufferedAmount() > CLIENT_HIGH_WATER) socket.pause();
    },
    fragment: (data, binary, first, last) => {
      if (!bridge.clientOpen) return;
      opts.touch(entry);
      bytesToClient.inc(data.length);
      // passed on frame by frame, as the target cut the message: nothing is held back to reassemble it
      const sent = first ? ws.sendFirstFragment(data, binary) : last ? ws.sendLastFragment(data) : ws.sendFragment(data);
      if (!sent && ws.getBufferedAmount() > CLIENT_HIGH_WATER) socket.pause();
    },
    ping: (data) => { if (bridge.clientOpen) ws.ping(data); },
    pong: () => undefined, // the client already had its pong from uWS
    close: (code, reason) => {
      if (!bridge.clientOpen) return void socket.end(); // the target answered our close: done
      bridge.closing = true;
      bridge.clientOpen = false;
      socket.write(encodeFrame(OP.close, closePayload(code, reason)));
      endSoon(socket);
      if (code === 1005) ws.end();
      else ws.end(code, reason);
    },
    error: (code, why) => {
      opts.log.warn({ event: 'proxy.ws.target_protocol_error', routespec: entry.route.routespec, why }, 'target broke the WebSocket protocol');
      socket.destroy();
      if (bridge.clientOpen) {
        bridge.clientOpen = false;
        ws.end(code === 1009 ? 1009 : 1011, why);
      }
    },
  });
  let read: Buffer = Buffer.alloc(0);
  const pushRead = () => reader.push(read);
  bridge.input.data = (d: Buffer) => {
    try {
      // every message in this read goes to the client in one write
      read = d;
      if (bridge.clientOpen) ws.cork(pushRead);
      else reader.push(d);
    } catch (err) {
      // one broken connection must not take the gateway down
      opts.log.error({ event: 'proxy.ws.failed', routespec: entry.route.routespec, err }, 'WebSocket relay failed');
      socket.destroy();
      if (bridge.clientOpen) {
        bridge.clientOpen = false;
        ws.end(1011, 'proxy error');
      }
    }
  };
  socket.on('error', () => undefined); // followed by close
  socket.on('close', () => {
    if (!bridge.clientOpen) return;
    bridge.clientOpen = false;
    ws.close(); // the target vanished without a closing handshake: so does the client's connection
  });
  if (bridge.head.length) reader.push(bridge.head);
  socket.resume();
}

/** Client → target; uWS cannot pause the client, so a target that stops reading for too long loses it. */
function toTarget(ws: uWS.WebSocket<Bridge>, opcode: number, message: ArrayBuffer, opts: WebSocketOptions): void {
  const bridge = ws.getUserData();
  if (bridge.closing || bridge.socket.destroyed) return;
  if (opcode === OP.text || opcode === OP.binary) opts.touch(bridge.entry);
  bytesToTarget.inc(message.byteLength);
  // written at once: uWS.js runs nextTick callbacks after each message callback, so corking until then batches nothing
  bridge.socket.write(encodeFrame(opcode, new Uint8Array(message)));
  if (bridge.socket.writableLength > TARGET_QUEUE_LIMIT) {
    opts.log.warn({ event: 'proxy.ws.target_slow', routespec: bridge.entry.route.routespec }, 'target is not reading: client closed');
    ws.end(1013, 'target is not keeping up');
  }
}

/** The client closed (or was closed): the target gets the same close code, then its socket ends. */
function clientClosed(bridge: Bridge, code: number, message: ArrayBuffer): void {
  bridge.clientOpen = false;
  const { socket } = bridge;
  if (bridge.closing || socket.destroyed) return;
  bridge.closing = true;
  if (code === 1006) return void socket.destroy(); // the client vanished: so does the target's connection
  socket.write(encodeFrame(OP.close, closePayload(code, new Uint8Array(message))));
  endSoon(socket);
}

/** Half-closes the target's socket; its own close follows, or the socket is destroyed after a grace period. */
function endSoon(socket: Socket): void {
  socket.end();
  setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref();
}
