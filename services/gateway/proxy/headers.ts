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
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
// eslint-disable-next-line no-control-regex
const BAD_VALUE = /[\u0000-\u0008\u000a-\u001f\u007f]/;
/** A request target may hold only visible ASCII (the path is normalised, the query passed as sent). */
export const BAD_TARGET = /[^\u0021-\u007e]/;

/**
 * The header section to send to the target, written by the gateway itself (values as UTF-8, as uWS
 * decoded them); Host is the client's (the target's `targetHost` when it sent none). Must run before
 * the uWS handler returns (req is stack-allocated).
 */
export function forwardRequestHead(req: uWS.HttpRequest, remoteAddress: string, targetHost: string, websocket: boolean): ForwardRequestHead {
  const named = connectionTokens(req.getHeader('connection'));
  const chunked = req.getHeader('transfer-encoding') !== '';
  const length = req.getHeader('content-length');
  let lines = '';
  let invalid: string | null = null;
  req.forEach((k, v) => {
    if (HOP_BY_HOP.has(k) || REQUEST_OWN.has(k) || named?.has(k) || (websocket && WS_HANDSHAKE.has(k))) return;
    if (!TOKEN.test(k) || BAD_VALUE.test(v)) invalid ??= `header ${JSON.stringify(k.slice(0, 40))} cannot be forwarded`;
    lines += `${k}: ${v}\r\n`;
  });
  // A chunked body is sent on chunked; otherwise the declared length goes along.
  if (chunked) lines += 'transfer-encoding: chunked\r\n';
  else if (length !== '') lines += `content-length: ${length}\r\n`;
  const host = req.getHeader('host');
  lines += `x-forwarded-for: ${appended(req.getHeader('x-forwarded-for'), remoteAddress, ', ')}\r\nx-forwarded-proto: ${appended(req.getHeader('x-forwarded-proto'), 'http', ',')}\r\n`;
  if (host) lines += `x-forwarded-host: ${appended(req.getHeader('x-forwarded-host'), host, ',')}\r\n`;
  else lines += `host: ${targetHost}\r\n`; // HTTP/1.1 needs one; an HTTP/1.0 client may have sent none
  if (!chunked && length !== '' && !/^[0-9]{1,15}$/.test(length)) invalid ??= 'bad Content-Length';
  return { lines, hasBody: chunked || (length !== '' && length !== '0'), chunked, invalid };
}

export interface ResponseHead {
  /** flat [name, value, ...] to write */
  headers: string[];
  /** the declared body length, when the target declared one */
  contentLength: number | undefined;
}

/** The target's response headers as the client should get them (flat, case and repeats kept as received). */
export function clientResponseHead(rawHeaders: string[]): ResponseHead {
  let named: Set<string> | null = null;
  let contentLength: number | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const k = rawHeaders[i].toLowerCase();
    if (k === 'connection') named = connectionTokens(rawHeaders[i + 1]);
    else if (k === 'content-length') contentLength = Number(rawHeaders[i + 1]);
  }
  const headers: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const k = rawHeaders[i].toLowerCase();
    if (HOP_BY_HOP.has(k) || RESPONSE_OWN.has(k) || named?.has(k)) continue;
    headers.push(rawHeaders[i], rawHeaders[i + 1]);
  }
  return { headers, contentLength: Number.isSafeInteger(contentLength) && contentLength! >= 0 ? contentLength : undefined };
}

/** Response header values are read as latin1 strings; uWS writes strings as UTF-8. Non-ASCII values go as their bytes. */
export function headerValue(v: string): string | Buffer {
  // eslint-disable-next-line no-control-regex
  return /[^\u0000-\u007f]/.test(v) ? Buffer.from(v, 'latin1') : v;
}
