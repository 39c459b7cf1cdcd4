// The gateway's HTTP plumbing on uWebSockets.js: a request snapshot taken before any await,
// abort tracking, corked writes, bounded body reads, and one way to answer with an error.
import uWS from 'uWebSockets.js';
import { errors, httpBody, statusLine, type HubError } from '../../shared/errors.js';
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
}

export function snapshot(req: uWS.HttpRequest, res: uWS.HttpResponse): RequestInfo {
  const headers: Record<string, string> = {};
  req.forEach((k, v) => { headers[k] = v; });
  return {
    method: req.getCaseSensitiveMethod().toUpperCase(),
    path: req.getUrl(),
    query: req.getQuery() ?? '',
    headers,
    remoteAddress: Buffer.from(res.getRemoteAddressAsText()).toString(),
  };
}

/** A response that knows whether the client went away; writes after that are dropped. */
export class Reply {
  aborted = false;
  done = false;
  /** headers of every answer the gateway gives itself (security headers); a handler's own headers of the same name win */
  base: Record<string, string> = {};

  constructor(readonly res: uWS.HttpResponse) {
    res.onAborted(() => { this.aborted = true; });
  }

  /** `cookies`: Set-Cookie lines (a header that may repeat, so not in `headers`). */
  send(status: number, body: string | Uint8Array, headers: Record<string, string> = {}, closeConnection = false, cookies: readonly string[] = []): void {
    if (this.aborted || this.done) return;
    this.done = true;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      const own = new Set(Object.keys(headers).map((k) => k.toLowerCase()));
      for (const [k, v] of Object.entries(this.base)) if (!own.has(k.toLowerCase())) this.res.writeHeader(k, v);
      for (const [k, v] of Object.entries(headers)) this.res.writeHeader(k, v);
      for (const c of cookies) this.res.writeHeader('Set-Cookie', c);
      this.res.end(body, closeConnection);
    });
  }

  json(status: number, value: unknown, headers: Record<string, string> = {}): void {
    this.send(status, JSON.stringify(value), { 'Content-Type': 'application/json', ...headers });
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

export function hasBody(info: RequestInfo): boolean {
  return (info.headers['content-length'] !== undefined && info.headers['content-length'] !== '0') || info.headers['transfer-encoding'] !== undefined;
}

export function wantsHtml(info: RequestInfo): boolean {
  return !info.path.startsWith('/hub/api') && (info.headers.accept ?? '').includes('text/html');
}

/** A readable page for browsers in the hub's look, with the same status an API client would get. */
export function errorPage(err: HubError): string {
  const retry = err.status === 503 || err.status === 504 ? '<p class="muted">This is usually brief: try again in a moment.</p>' : '';
  return page(statusLine(err.status), `<p class="error" id="error-message">${escapeHtml(err.message)}</p>${retry}<p><a class="button" href="/hub/home">Back to the hub</a></p>`);
}
