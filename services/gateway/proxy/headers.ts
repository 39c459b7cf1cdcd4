// Headers on the way through: hop-by-hop headers (and those the Connection header names) stay on
// their hop; framing is the gateway's own on each side (so no Content-Length/Transfer-Encoding
// disagreement can be smuggled through); X-Forwarded-For/-Proto/-Host are appended as
// configurable-http-proxy does, so the value the gateway adds is always the last one; Host is kept.
import type uWS from 'uWebSockets.js';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'proxy-authenticate', 'proxy-authorization', 'http2-settings',
]);

/** Request headers the gateway itself takes care of: the body's framing, and `Expect` (uWS answers 100 Continue). */
const REQUEST_OWN = new Set(['content-length', 'expect', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);

/** The scheme clients reach the front door with: `https` when it speaks TLS (front-door.ts), set once at start. */
let forwardedProto = 'http';
export function useForwardedProto(scheme: 'http' | 'https'): void {
  forwardedProto = scheme;
}

/** Response headers uWS writes itself: framing and Date. */
const RESPONSE_OWN = new Set(['content-length', 'date']);

/** WebSocket handshake headers that belong to the gateway↔target connection, not the client's. */
const WS_HANDSHAKE = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-extensions', 'sec-websocket-accept']);

function connectionTokens(value: string): Set<string> | null {
  if (!value) return null;
  return new Set(value.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
}

const appended = (existing: string, value: string, sep: string) => (existing ? `${existing}${sep}${value}` : value);

export interface ForwardRequestHead {
  /** the header section for the target: `name: value\r\n` lines (repeated headers kept), without the blank line */
  lines: string;
  hasBody: boolean;
  /** the client's body is chunked: it goes to the target chunked too */
  chunked: boolean;
  /** why the request cannot be written to the target as is (a control character in a header), or null */
  invalid: string | null;
  /** the client's Accept header ('' when none): browsers get error pages, API clients JSON */
  accept: string;
  /** the client's Authorization header ('' when none): a hub token in it is judged before forwarding (token-gate.ts) */
  authorization: string;
}

/** Request headers that do not go to the target as the client sent them, for HTTP and for WebSocket upgrades. */
const REQUEST_DROP = new Set([...HOP_BY_HOP, ...REQUEST_OWN]);
const UPGRADE_DROP = new Set([...REQUEST_DROP, ...WS_HANDSHAKE]);
/**
 * Anywhere in the header lines: a control character other than HTAB, or a CR or LF that is not one of
 * the CRLFs the gateway put there (uWS ends names at ':' or a byte <= 32, so only values need this).
 */
// eslint-disable-next-line no-control-regex
const BAD_LINES = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]|\r(?!\n)|(?<!\r)\n/;
/** A request target may hold only visible ASCII (the path is normalised, the query passed as sent). */
export const BAD_TARGET = /[^\u0021-\u007e]/;

/**
 * The header section to send to the target, written by the gateway itself (values as UTF-8, as uWS
 * decoded them); Host is the client's (the target's `targetHost` when it sent none). Must run before
 * the uWS handler returns (req is stack-allocated).
 */
export function forwardRequestHead(req: uWS.HttpRequest, remoteAddress: string, targetHost: string, websocket: boolean): ForwardRequestHead {
  const drop = websocket ? UPGRADE_DROP : REQUEST_DROP;
  let lines = '';
  let connection = '';
  let chunked = false;
  let length = '';
  let host = '';
  let accept = '';
  let authorization = '';
  let xff = '';
  let xfp = '';
  let xfh = '';
  // one pass over the headers (each getHeader would be a call into uWS of its own)
  req.forEach((k, v) => {
    switch (k) {
      case 'connection': connection = appended(connection, v, ', '); return;
      case 'transfer-encoding': chunked = true; return;
      case 'content-length': length = v; return;
      case 'x-forwarded-for': xff = appended(xff, v, ', '); return;
      case 'x-forwarded-proto': xfp = appended(xfp, v, ','); return;
      case 'x-forwarded-host': xfh = appended(xfh, v, ','); return;
      case 'host': host = v; break;
      case 'accept': accept = v; break;
      case 'authorization': authorization = v; break;
    }
    if (!drop.has(k)) lines += `${k}: ${v}\r\n`;
  });
  // headers the Connection header names stay on the client's hop too (rare: a second pass)
  const named = connection && !PLAIN_CONNECTION.test(connection) ? connectionTokens(connection) : null;
  if (named) {
    lines = '';
    req.forEach((k, v) => {
      if (!drop.has(k) && !named.has(k) && k !== 'host' && k !== 'accept') lines += `${k}: ${v}\r\n`;
    });
    if (!named.has('host') && host) lines += `host: ${host}\r\n`;
    if (!named.has('accept') && accept) lines += `accept: ${accept}\r\n`;
  }
  let invalid: string | null = BAD_LINES.test(lines) ? 'a header holds a control character' : null;
  // A chunked body is sent on chunked; otherwise the declared length goes along.
  if (chunked) lines += 'transfer-encoding: chunked\r\n';
  else if (length !== '') {
    lines += `content-length: ${length}\r\n`;
    if (!/^[0-9]{1,15}$/.test(length)) invalid ??= 'bad Content-Length';
  }
  lines += `x-forwarded-for: ${appended(xff, remoteAddress, ', ')}\r\nx-forwarded-proto: ${appended(xfp, forwardedProto, ',')}\r\n`;
  if (host) lines += `x-forwarded-host: ${appended(xfh, host, ',')}\r\n`;
  else lines += `host: ${targetHost}\r\n`; // HTTP/1.1 needs one; an HTTP/1.0 client may have sent none
  return { lines, hasBody: chunked || (length !== '' && length !== '0'), chunked, invalid, accept, authorization };
}

/** Response headers the client does not get: hop-by-hop ones, and those uWS writes itself. */
const RESPONSE_DROP = new Set([...HOP_BY_HOP, ...RESPONSE_OWN]);
/** Name lengths among RESPONSE_DROP: other names need no lower-casing to be kept. */
const DROP_LENGTH = new Uint8Array(64);
for (const name of RESPONSE_DROP) DROP_LENGTH[name.length] = 1;
const PLAIN_CONNECTION = /^[ \t]*(?:keep-alive|close)[ \t]*$/i;

/** The target's response headers as the client should get them (flat, case and repeats kept as received). */
export function clientResponseHead(headers: string[], connection: string): string[] {
  const named = connection && !PLAIN_CONNECTION.test(connection) ? connectionTokens(connection) : null;
  const out: string[] = [];
  for (let i = 0; i < headers.length; i += 2) {
    const k = headers[i];
    if (named || (k.length < 64 && DROP_LENGTH[k.length])) {
      const lower = k.toLowerCase();
      if (RESPONSE_DROP.has(lower) || named?.has(lower)) continue;
    }
    out.push(k, headers[i + 1]);
  }
  return out;
}

/** Response header values are read as latin1 strings; uWS writes strings as UTF-8. Non-ASCII values go as their bytes. */
export function headerValue(v: string): string | Buffer {
  // eslint-disable-next-line no-control-regex
  return /[^\u0000-\u007f]/.test(v) ? Buffer.from(v, 'latin1') : v;
}
