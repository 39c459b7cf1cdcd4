// WebSocket proxying. uWS accepts the client's upgrade only after the target accepted the gateway's
// own upgrade request (so the target authorizes it exactly as it would an HTTP request, and a refusal
// reaches the client as the target's HTTP answer). Then messages, pings, pongs and close codes pass
// both ways; a slow client pauses the target's socket.
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import uWS from 'uWebSockets.js';
import { errors } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { answerError, remoteAddressOf } from './forward.js';
import { clientResponseHead, forwardRequestHead, headerValue } from './headers.js';
import type { RouteEntry } from './table.js';
import { bytesToClient, bytesToTarget, webSockets } from '../metrics.js';
import { closePayload, encodeFrame, FrameReader, OP } from './ws-frames.js';

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
  const head = forwardRequestHead(req, remoteAddressOf(res), true);
  const browser = req.getHeader('accept').includes('text/html');
  let aborted = false;
  let upReq: http.ClientRequest | undefined;
  res.onAborted(() => {
    aborted = true;
    upReq?.destroy();
  });

  const key = randomBytes(16).toString('base64');
  const mod = entry.protocol === 'https:' ? https : http;
  try {
    upReq = mod.request({
      host: entry.hostname, port: entry.port, method: 'GET', path: entry.basePath + (query ? `${path}?${query}` : path), setHost: false,
      headers: [...head.headers, 'connection', 'Upgrade', 'upgrade', 'websocket', 'sec-websocket-version', '13', 'sec-websocket-key', key],
      agent: false, // an upgraded connection is never pooled
    });
  } catch (e) {
    return void answerError(res, errors.badRequest(`Request not forwardable: ${(e as Error).message.slice(0, 100)}`), browser);
  }
  // The target must accept or refuse within the connect timeout; the first outcome answers the client.
  const timer = setTimeout(() => upReq!.destroy(new Error('handshake timeout')), opts.connectTimeoutMs);
  let settled = false;
  const settle = (): boolean => {
    if (settled || aborted) return false;
    settled = true;
    clearTimeout(timer);
    return true;
  };
  upReq.on('upgrade', (upRes, socket, extra) => {
    if (!settle()) return void socket.destroy();
    if (upRes.headers['sec-websocket-accept'] !== createHash('sha1').update(key + WS_GUID).digest('base64')) {
      socket.destroy();
      opts.log.warn({ event: 'proxy.ws.bad_handshake', routespec: entry.route.routespec }, 'target answered the upgrade wrongly');
      return void answerError(res, errors.unavailable(`The server at ${entry.route.routespec}`), browser);
    }
    socket.pause(); // until the client's side is open
    socket.setNoDelay(true);
    socket.setTimeout(0);
    opts.touch(entry);
    const bridge: Bridge = { entry, socket, head: extra, clientOpen: true, closing: false };
    const protocol = upRes.headers['sec-websocket-protocol'] ?? '';
    res.cork(() => res.upgrade(bridge, clientKey, protocol, '', context));
  });
  // The target refused the upgrade (e.g. 403 from its own authorization): the client gets that answer.
  upReq.on('response', (upRes) => relayRefusal(res, upRes, settle));
  upReq.on('error', (e: NodeJS.ErrnoException) => {
    if (!settle()) return;
    opts.log.warn({ event: 'proxy.target_unreachable', routespec: entry.route.routespec, code: e.code, websocket: true }, 'target not reachable');
    opts.onUnreachable(entry);
    answerError(res, errors.unavailable(`The server at ${entry.route.routespec}`), browser);
  });
  upReq.end();
}

/** The target's non-101 answer, whole (such answers are small: the body is capped). `settle` is false once the client was answered. */
function relayRefusal(res: uWS.HttpResponse, upRes: http.IncomingMessage, settle: () => boolean): void {
  const LIMIT = 64 * 1024;
  const chunks: Buffer[] = [];
  let size = 0;
  upRes.on('data', (c: Buffer) => {
    if (size < LIMIT) chunks.push(c);
    size += c.length;
  });
  upRes.on('end', () => {
    if (!settle()) return;
    const head = clientResponseHead(upRes.rawHeaders);
    const body = Buffer.concat(chunks).subarray(0, LIMIT);
    res.cork(() => {
      res.writeStatus(`${upRes.statusCode} ${upRes.statusMessage ?? ''}`.trim());
      for (let i = 0; i < head.headers.length; i += 2) res.writeHeader(head.headers[i], headerValue(head.headers[i + 1]));
      res.end(body);
    });
  });
  upRes.on('error', () => { if (settle()) res.close(); });
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
      ws.send(data, binary);
      if (ws.getBufferedAmount() > CLIENT_HIGH_WATER) socket.pause();
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
  socket.on('data', (d: Buffer) => {
    try {
      // every message in this chunk goes to the client in one write
      if (bridge.clientOpen) ws.cork(() => reader.push(d));
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
  });
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
  corkUntilNextTick(bridge.socket);
  bridge.socket.write(encodeFrame(opcode, new Uint8Array(message)));
  if (bridge.socket.writableLength > TARGET_QUEUE_LIMIT) {
    opts.log.warn({ event: 'proxy.ws.target_slow', routespec: bridge.entry.route.routespec }, 'target is not reading: client closed');
    ws.end(1013, 'target is not keeping up');
  }
}

/** uWS hands over every message of one read in a row: they reach the target in one write. */
function corkUntilNextTick(socket: Socket): void {
  if (socket.writableCorked) return;
  socket.cork();
  process.nextTick(() => socket.uncork());
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
