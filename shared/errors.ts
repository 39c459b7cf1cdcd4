// One error type for the whole hub, with one mapping each to HTTP, gRPC and NATS.
// Codes are stable (`HUB_ERR_<AREA>_<WHAT>`); messages are safe to show to a client.

export interface HubErrorOptions {
  cause?: unknown;
  retryable?: boolean;
  /** Extra headers an HTTP answer must carry, e.g. Retry-After on 429. */
  headers?: Record<string, string>;
}

export class HubError extends Error {
  readonly status: number;
  readonly code: string;
  readonly retryable: boolean;
  readonly headers: Record<string, string>;

  constructor(status: number, code: string, message: string, options: HubErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'HubError';
    this.status = status;
    this.code = code;
    this.retryable = options.retryable ?? (status === 503 || status === 504);
    this.headers = options.headers ?? {};
  }

  toJSON(): { status: number; code: string; message: string; retryable: boolean; headers?: Record<string, string> } {
    const headers = Object.keys(this.headers).length ? this.headers : undefined;
    return { status: this.status, code: this.code, message: this.message, retryable: this.retryable, headers };
  }
}

/** The catalogue: every HubError is made through one of these. */
export const errors = {
  badRequest: (message: string, code = 'HUB_ERR_REQUEST_INVALID') => new HubError(400, code, message),
  unauthorized: (message = 'Authentication required') => new HubError(401, 'HUB_ERR_AUTH_REQUIRED', message),
  forbidden: (message = 'Permission denied', code = 'HUB_ERR_AUTH_FORBIDDEN') => new HubError(403, code, message),
  notFound: (message = 'Not found', code = 'HUB_ERR_NOT_FOUND') => new HubError(404, code, message),
  methodNotAllowed: (message = 'Method not allowed') => new HubError(405, 'HUB_ERR_METHOD_NOT_ALLOWED', message),
  conflict: (message: string, code = 'HUB_ERR_CONFLICT') => new HubError(409, code, message),
  bodyTooLarge: (limit: number) =>
    new HubError(413, 'HUB_ERR_REQUEST_TOO_LARGE', `Request body is larger than the limit of ${limit} bytes`),
  tooManyRequests: (message: string, retryAfterSeconds: number) =>
    new HubError(429, 'HUB_ERR_RATE_LIMITED', message, { headers: { 'Retry-After': String(retryAfterSeconds) } }),
  internal: (cause?: unknown) => new HubError(500, 'HUB_ERR_INTERNAL', 'Internal error', { cause }),
  unavailable: (what: string, cause?: unknown) =>
    new HubError(503, 'HUB_ERR_ACTOR_UNAVAILABLE', `${what} is not available, try again shortly`, { cause }),
  /** a proxied target answered with something that is not an acceptable HTTP response */
  badGateway: (what: string, cause?: unknown) =>
    new HubError(502, 'HUB_ERR_PROXY_BAD_RESPONSE', `${what} sent an invalid response`, { cause }),
  timeout: (what: string, cause?: unknown) =>
    new HubError(504, 'HUB_ERR_ACTOR_TIMEOUT', `${what} did not answer in time`, { cause }),
  /** An OAuth 2 error (RFC 6749 §5.2): the code is `HUB_ERR_OAUTH_<ERROR>`, so the token endpoint can name it again. */
  oauth: (error: OAuthErrorName, message: string) =>
    new HubError(error === 'invalid_client' ? 401 : 400, `HUB_ERR_OAUTH_${error.toUpperCase()}`, message),
} as const;

export type OAuthErrorName = 'invalid_request' | 'invalid_client' | 'invalid_grant' | 'unauthorized_client' | 'unsupported_grant_type' | 'invalid_scope';

/** The RFC 6749 error name of an OAuth HubError, or null for any other error. */
export function oauthErrorName(err: HubError): OAuthErrorName | null {
  return err.code.startsWith('HUB_ERR_OAUTH_') ? (err.code.slice('HUB_ERR_OAUTH_'.length).toLowerCase() as OAuthErrorName) : null;
}

/** Any thrown value as a HubError; unknown errors become a 500 that hides their details. */
export function asHubError(err: unknown): HubError {
  return err instanceof HubError ? err : errors.internal(err);
}

// ---- HTTP ----------------------------------------------------------------

export function httpBody(err: HubError): string {
  return JSON.stringify({ status: err.status, message: err.message });
}

export const HTTP_STATUS_TEXT: Readonly<Record<number, string>> = {
  200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No Content', 302: 'Found', 400: 'Bad Request',
  401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed', 409: 'Conflict',
  413: 'Payload Too Large', 429: 'Too Many Requests', 500: 'Internal Server Error',
  502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

export function statusLine(status: number): string {
  return `${status} ${HTTP_STATUS_TEXT[status] ?? 'Unknown'}`;
}

// ---- gRPC ----------------------------------------------------------------
// Numeric gRPC status codes (stable by the gRPC spec), so this file need not load grpc-js.

const GRPC = { DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, ALREADY_EXISTS: 6, PERMISSION_DENIED: 7, RESOURCE_EXHAUSTED: 8,
  INVALID_ARGUMENT: 3, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14, UNAUTHENTICATED: 16, CANCELLED: 1 } as const;

const GRPC_BY_HTTP: Readonly<Record<number, number>> = {
  400: GRPC.INVALID_ARGUMENT, 401: GRPC.UNAUTHENTICATED, 403: GRPC.PERMISSION_DENIED, 404: GRPC.NOT_FOUND,
  405: GRPC.UNIMPLEMENTED, 409: GRPC.ALREADY_EXISTS, 413: GRPC.RESOURCE_EXHAUSTED, 429: GRPC.RESOURCE_EXHAUSTED,
  503: GRPC.UNAVAILABLE, 504: GRPC.DEADLINE_EXCEEDED,
};

/** The HubError as a gRPC status; `details` carries the whole error so the caller can rebuild it. */
export function toGrpcStatus(err: HubError): { code: number; details: string } {
  return { code: GRPC_BY_HTTP[err.status] ?? GRPC.INTERNAL, details: JSON.stringify(err.toJSON()) };
}

export function fromGrpcStatus(e: { code?: number; details?: string }, what: string): HubError {
  try {
    const body = JSON.parse(e.details ?? '');
    if (typeof body?.status === 'number' && typeof body.code === 'string') {
      return new HubError(body.status, body.code, String(body.message), { retryable: Boolean(body.retryable), headers: body.headers });
    }
  } catch {
    // not one of ours: fall through to the transport-level mapping
  }
  if (e.code === GRPC.UNAVAILABLE || e.code === GRPC.CANCELLED) return errors.unavailable(what, e);
  if (e.code === GRPC.DEADLINE_EXCEEDED) return errors.timeout(what, e);
  return errors.internal(e);
}

// ---- NATS ----------------------------------------------------------------
// The NATS services framework's error headers, plus our stable code.

export const NATS_ERROR_HEADERS = { status: 'Nats-Service-Error-Code', message: 'Nats-Service-Error', code: 'Hub-Error-Code' } as const;

export function toNatsHeaders(err: HubError): Record<string, string> {
  return { [NATS_ERROR_HEADERS.status]: String(err.status), [NATS_ERROR_HEADERS.message]: err.message, [NATS_ERROR_HEADERS.code]: err.code };
}

/** Rebuilds a HubError from a reply's headers (null when the reply is not an error), or from a request failure. */
export function fromNatsReply(headers: { get(k: string): string } | undefined): HubError | null {
  const status = Number(headers?.get(NATS_ERROR_HEADERS.status) || 0);
  if (!status) return null;
  return new HubError(status, headers?.get(NATS_ERROR_HEADERS.code) || 'HUB_ERR_REMOTE', headers?.get(NATS_ERROR_HEADERS.message) || 'Error');
}

export function fromNatsRequestError(e: unknown, what: string): HubError {
  const code = (e as { code?: string })?.code;
  if (code === '503') return errors.unavailable(what, e); // no responders: the actor is restarting
  if (code === 'TIMEOUT' || code === 'REQUEST_TIMEOUT') return errors.timeout(what, e);
  return asHubError(e);
}
