// The gateway's HTTP plumbing on uWebSockets.js: a request snapshot taken before any await,
// abort tracking, corked writes, bounded body reads, and one way to answer with an error.
import uWS from 'uWebSockets.js';
import { requestIdFor, type RequestContext } from '../../shared/context.js';
import type { CallOptions } from '../../shared/contracts/index.js';
import { errors, httpBody, statusLine, type HubError } from '../../shared/errors.js';
import { decodeUtf8 } from '../../shared/json.js';
import { hubUrl } from '../../shared/urls.js';
import { escapeHtml, page } from './web/html.js';

/** The native build exports getParts; the pure-JS fallback shim does not. */
export const UWS_BUILD: 'native' | 'fallback' = typeof (uWS as unknown as Record<string, unknown>).getParts === 'function' ? 'native' : 'fallback';

/** What a handler may read of a request: uWS's req object is only valid until the first await. */
export interface RequestInfo {
  method: string;
  path: string;
  query: string;
  headers: Record<string, string>;
  remoteAddress: string;
  /** the client's X-Request-Id when sane, else a new one (shared/context.ts) */
  requestId: string;
  /** performance.now() when the request arrived */
  start: number;
  // Filled in as the request is answered, for its log line, its metrics and audit events:
  /** the route pattern that answered (`/hub/api/users/:name`); `unmatched` until one does */
  route: string;
  /** who asked (`user:<name>`, `service:<name>`), once identified */
  who: string;
  /** the error it was answered with, if any */
  error?: HubError;
  /** a handler already published the audit event of this request's refusal (e.g. a failed login) */
  audited?: boolean;
  /** why a request was refused, when the handler answered a 403 itself */
  denyReason?: string;
}

const addressDecoder = new TextDecoder();

/**
 * The client's address as text: IPv4 as dotted decimal from uWS's 4 raw bytes (no inet_ntop and no text
 * buffer per request: this runs for every proxied request's X-Forwarded-For), IPv6 as uWS spells it.
 */
export function remoteAddressOf(res: uWS.HttpResponse): string {
  const raw = res.getRemoteAddress();
  if (raw.byteLength !== 4) return addressDecoder.decode(res.getRemoteAddressAsText());
  const b = new Uint8Array(raw);
  return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
}

const AUTH_HEADER = /^(?:token|bearer)\s+(\S+)$/i;

/** The token of `Authorization: token X` or `Authorization: bearer X`; null for other schemes (Basic, ...). */
export function tokenOfAuthorization(header: string): string | null {
  return AUTH_HEADER.exec(header.trim())?.[1] ?? null;
}

export function snapshot(req: uWS.HttpRequest, res: uWS.HttpResponse): RequestInfo {
  const headers: Record<string, string> = {};
  req.forEach((k, v) => { headers[k] = v; });
  return {
    method: req.getCaseSensitiveMethod().toUpperCase(),
    path: req.getUrl(),
    query: req.getQuery() ?? '',
    headers,
    remoteAddress: remoteAddressOf(res),
    requestId: requestIdFor(headers['x-request-id']),
    start: performance.now(),
    route: 'unmatched',
    who: 'anonymous',
  };
}

/** The request as it travels to the actors (gRPC metadata) and into audit events. */
export function requestContext(info: RequestInfo): RequestContext {
  return { requestId: info.requestId, who: info.who, client: info.remoteAddress };
}

/** Headers written on every answer, compiled once: name, its lower case (to let a handler's own win), value. */
export interface BaseHeaders {
  /** one by one, for the rare answer that sets one of them itself */
  each: readonly (readonly [name: Buffer, lower: string, value: Buffer])[];
  /** all of them as one header line block (first name, then the rest joined by CRLF): one native call per answer */
  block: readonly [name: Buffer, value: Buffer] | null;
}

/** Names and values as bytes once, so no answer converts the same strings again. */
export function compileHeaders(headers: Record<string, string>): BaseHeaders {
  const entries = Object.entries(headers);
  for (const [k, v] of entries) {
    if (/[\r\n]/.test(k + v)) throw new Error(`header ${JSON.stringify(k)}: line breaks are not allowed`);
  }
  const each = entries.map(([k, v]) => [Buffer.from(k, 'latin1'), k.toLowerCase(), Buffer.from(v, 'latin1')] as const);
  const block = entries.length
    ? [Buffer.from(entries[0][0], 'latin1'), Buffer.from([entries[0][1], ...entries.slice(1).map(([k, v]) => `${k}: ${v}`)].join('\r\n'), 'latin1')] as const
    : null;
  return { each, block };
}
const NO_BASE: BaseHeaders = { each: [], block: null };

const NO_HEADERS: Record<string, string> = Object.freeze({}) as Record<string, string>;
const JSON_HEADERS: Record<string, string> = { 'Content-Type': 'application/json' };

/** A response that knows whether the client went away; writes after that are dropped. */
export class Reply {
  aborted = false;
  done = false;
  /** headers of every answer the gateway gives itself (security headers); a handler's own headers of the same name win */
  base: BaseHeaders = NO_BASE;
  /** the status written (0 until then) */
  status = 0;
  /** a HEAD request: headers (with the length the body would have), never the body */
  headOnly = false;

  /** a streamed answer waiting for the client to take what was written (settled on abort too) */
  private writable: (() => void) | null = null;

  constructor(readonly res: uWS.HttpResponse) {
    res.onAborted(() => {
      this.aborted = true;
      this.writable?.();
    });
  }

  /** Status line and headers (the base ones unless the handler gave its own of that name); inside a cork. */
  private writeHead(status: number, headers: Record<string, string>, cookies: readonly string[]): void {
    this.res.writeStatus(statusLine(status));
    // on the hot path (every API answer) no per-request set or entry arrays: handlers pass one to three headers
    let own: string[] | undefined;
    for (const k in headers) {
      (own ??= []).push(k.toLowerCase());
      this.res.writeHeader(k, headers[k]);
    }
    const { each, block } = this.base;
    if (block && (!own || !each.some(([, lower]) => own!.includes(lower)))) this.res.writeHeader(block[0], block[1]);
    else for (const [name, lower, value] of each) if (!own?.includes(lower)) this.res.writeHeader(name, value);
    for (const c of cookies) this.res.writeHeader('Set-Cookie', c);
  }

  /**
   * An answer written part by part as `parts` yields them (chunked), each part only once the client has taken
   * the one before: an answer of many megabytes (a group of a million) never sits whole in memory. A client
   * that goes away stops the parts. A failure after the head cuts the connection (never a complete-looking answer).
   */
  async stream(status: number, headers: Record<string, string>, parts: AsyncIterable<string>): Promise<void> {
    if (this.aborted || this.done) return;
    this.done = true;
    this.status = status;
    this.res.cork(() => this.writeHead(status, headers, []));
    if (this.headOnly) {
      this.res.cork(() => this.res.endWithoutBody());
      return;
    }
    try {
      for await (const part of parts) {
        if (this.aborted) return;
        let taken = true;
        this.res.cork(() => { taken = this.res.write(part); });
        if (!taken && !this.aborted) {
          await new Promise<void>((resolve) => {
            this.writable = resolve;
            this.res.onWritable(() => { resolve(); return true; });
          });
          this.writable = null;
        }
      }
    } catch (e) {
      if (!this.aborted) this.res.close();
      throw e;
    }
    if (!this.aborted) this.res.cork(() => this.res.end());
  }

  /** `cookies`: Set-Cookie lines (a header that may repeat, so not in `headers`). */
  send(status: number, body: string | Uint8Array, headers: Record<string, string> = {}, closeConnection = false, cookies: readonly string[] = []): void {
    if (this.aborted || this.done) return;
    this.done = true;
    this.status = status;
    this.res.cork(() => {
      this.writeHead(status, headers, cookies);
      // a body after the answer to a HEAD would be read as the start of the next answer on this connection
      // (uWS's own reported length makes it drop the connection, harmless only when it closes anyway: else the
      // header is ours; called without arguments, as an explicit undefined length reads as a huge number)
      if (this.headOnly) {
        const length = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
        if (closeConnection) this.res.endWithoutBody(length, true);
        else {
          this.res.writeHeader('Content-Length', String(length));
          this.res.endWithoutBody();
        }
      } else this.res.end(body, closeConnection);
    });
  }

  json(status: number, value: unknown, headers: Record<string, string> = NO_HEADERS): void {
    this.send(status, JSON.stringify(value), headers === NO_HEADERS ? JSON_HEADERS : { ...JSON_HEADERS, ...headers });
  }

  /** An error as `{"status", "message"}`. After an early answer (a 413) uWS discards the rest of the body as it arrives. */
  error(err: HubError): void {
    this.send(err.status, httpBody(err), { 'Content-Type': 'application/json', ...err.headers });
  }
}

/**
 * Reads the request body into memory up to `limit` bytes. A declared Content-Length over the limit is refused
 * before a byte is read; a chunked body is refused as soon as it crosses the limit.
 */
export function readBody(reply: Reply, info: RequestInfo, limit: number): Promise<Buffer> {
  const declared = info.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) return Promise.reject(errors.bodyTooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    reply.res.onData((chunk, isLast) => {
      if (refused) return;
      size += chunk.byteLength;
      if (size > limit) {
        refused = true;
        reject(errors.bodyTooLarge(limit));
        return;
      }
      chunks.push(Buffer.from(chunk.slice(0))); // uWS reuses the chunk's memory after this callback
      if (isLast) resolve(Buffer.concat(chunks, size));
    });
  });
}

const isHex = (b: number) => (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

/**
 * Throws 400 unless `s` (a path or query as uWS gives it) percent-decodes to valid UTF-8. uWS turns raw bytes
 * that are not UTF-8 into U+FFFD before we see them, so a raw U+FFFD counts as invalid (send it encoded).
 * With `strictPercent`, a `%` not followed by two hex digits is refused too (paths); queries keep it literally,
 * as URLSearchParams does.
 */
function checkPercentUtf8(s: string, what: string, strictPercent: boolean): void {
  if (s.indexOf('%') < 0 && s.indexOf('\uFFFD') < 0) return; // the common case: nothing to decode
  if (s.indexOf('\uFFFD') >= 0) throw errors.badRequest(`${what} is not valid UTF-8`, 'HUB_ERR_REQUEST_ENCODING');
  const raw = Buffer.from(s, 'utf8');
  const out = Buffer.allocUnsafe(raw.length);
  let n = 0;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i];
    if (b === 0x25 && i + 2 < raw.length && isHex(raw[i + 1]) && isHex(raw[i + 2])) {
      out[n++] = parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16);
      i += 2;
    } else if (b === 0x25 && strictPercent) {
      throw errors.badRequest(`${what} has a malformed percent-encoding`, 'HUB_ERR_REQUEST_ENCODING');
    } else out[n++] = b;
  }
  decodeUtf8(out.subarray(0, n), `${what} (percent-decoded)`);
}

/**
 * What the hub reads itself (path segments, query parameters, the body) must be UTF-8: anything else is a 400,
 * never text with U+FFFD in place of the bytes. Checked once at the door, so URLSearchParams,
 * decodeURIComponent and body.toString() further in never meet a sequence they would alter.
 */
export function checkRequestText(info: RequestInfo, body: Buffer | null): void {
  checkPercentUtf8(info.path, 'Request path', true);
  checkPercentUtf8(info.query, 'Query string', false);
  if (body?.length) decodeUtf8(body);
}

export function hasBody(info: RequestInfo): boolean {
  return (info.headers['content-length'] !== undefined && info.headers['content-length'] !== '0') || info.headers['transfer-encoding'] !== undefined;
}

export function wantsHtml(info: RequestInfo): boolean {
  return !info.path.startsWith('/hub/api') && (info.headers.accept ?? '').includes('text/html');
}

/** A readable page for browsers in the hub's look, with the same status an API client would get. */
export function errorPage(err: HubError): string {
  const retry = err.status === 503 || err.status === 504 ? '<p class="muted">This is usually brief: try again in a moment.</p>' : '';
  return page(statusLine(err.status), `<p class="error" id="error-message">${escapeHtml(err.message)}</p>${retry}<p><a class="button" href="${escapeHtml(hubUrl('/hub/home'))}">Back to the hub</a></p>`);
}

/** Options for the calls to actors made for this request. */
export function callOf(info: RequestInfo): CallOptions {
  return { request: requestContext(info) };
}
