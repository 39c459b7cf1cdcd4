// One error type for the whole hub, with one mapping each to HTTP, gRPC and NATS.
// Codes are stable (`HUB_ERR_<AREA>_<WHAT>`); messages are safe to show to a client.

export interface HubErrorOptions {
  cause?: unknown;
  retryable?: boolean;
  /** Extra headers an HTTP answer must carry, e.g. Retry-After on 429. */
  headers?: Record<string, string>;
}

// Numeric gRPC status codes (stable by the gRPC spec), so this file need not load grpc-js.
const GRPC = { CANCELLED: 1, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, ALREADY_EXISTS: 6, PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8, FAILED_PRECONDITION: 9, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14, UNAUTHENTICATED: 16 } as const;

/**
 * The catalogue: every error any actor answers with. The code is stable (tests and clients match on it),
 * the HTTP and gRPC statuses follow from it, the message is the default shown to the client.
 */
export const CATALOGUE = {
  HUB_ERR_REQUEST_INVALID: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'Invalid request' },
  HUB_ERR_NAME_INVALID: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'Invalid name' },
  HUB_ERR_GROUPS_MANAGED: { status: 400, grpc: GRPC.FAILED_PRECONDITION, message: 'Group membership is managed by the authenticator' },
  HUB_ERR_SCOPE_INVALID: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'Invalid scope' },
  HUB_ERR_SCOPE_NOT_HELD: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'A token cannot have scopes its owner or requester does not hold' },
  HUB_ERR_ROLE_NOT_FOUND: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'No such role' },
  HUB_ERR_MEMBER_NOT_FOUND: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'No such user' },
  HUB_ERR_RENAME_TAKEN: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'That name is taken' },
  HUB_ERR_SHARE_TARGET_NOT_FOUND: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'No such user or group to share with' },
  HUB_ERR_SHARE_INVALID: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'Invalid share' },
  HUB_ERR_SERVER_NOT_STARTING: { status: 400, grpc: GRPC.FAILED_PRECONDITION, message: 'The server is not starting' },
  HUB_ERR_AUTH_REQUIRED: { status: 401, grpc: GRPC.UNAUTHENTICATED, message: 'Authentication required' },
  HUB_ERR_AUTH_FORBIDDEN: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'Permission denied' },
  HUB_ERR_AUTH_MISSING: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'Missing or invalid credentials' },
  HUB_ERR_LOGIN_EXPIRED: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'The login has expired' },
  HUB_ERR_SHARE_SCOPE_NOT_HELD: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'Cannot share a scope one does not hold' },
  HUB_ERR_SHARE_TARGET_FORBIDDEN: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'Cannot share with a name one may not read' },
  HUB_ERR_SETUP_CODE: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'The set-up code is not right' },
  HUB_ERR_XSRF: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'XSRF check failed' },
  HUB_ERR_TOKEN_REVOKED: { status: 403, grpc: GRPC.PERMISSION_DENIED, message: 'This token is no longer valid' },
  HUB_ERR_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'Not found' },
  HUB_ERR_NO_ACCESS: { status: 404, grpc: GRPC.NOT_FOUND, message: 'Not found' },
  HUB_ERR_USER_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such user' },
  HUB_ERR_GROUP_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such group' },
  HUB_ERR_SERVER_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such server' },
  HUB_ERR_SERVICE_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such service' },
  HUB_ERR_SHARE_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such share' },
  HUB_ERR_SHARE_CODE_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such share code, or it has expired' },
  HUB_ERR_TOKEN_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such token' },
  HUB_ERR_OAUTH_CLIENT_NOT_FOUND: { status: 404, grpc: GRPC.NOT_FOUND, message: 'No such OAuth client' },
  HUB_ERR_METHOD_NOT_ALLOWED: { status: 405, grpc: GRPC.UNIMPLEMENTED, message: 'Method not allowed' },
  HUB_ERR_CONFLICT: { status: 409, grpc: GRPC.ALREADY_EXISTS, message: 'Conflict' },
  HUB_ERR_USER_EXISTS: { status: 409, grpc: GRPC.ALREADY_EXISTS, message: 'The user already exists' },
  HUB_ERR_GROUP_EXISTS: { status: 409, grpc: GRPC.ALREADY_EXISTS, message: 'The group already exists' },
  HUB_ERR_REQUEST_ENCODING: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'The request is not valid UTF-8' },
  HUB_ERR_REQUEST_TOO_DEEP: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'The JSON body is nested too deeply' },
  HUB_ERR_REQUEST_TOO_LARGE: { status: 413, grpc: GRPC.RESOURCE_EXHAUSTED, message: 'Request body too large' },
  HUB_ERR_RATE_LIMITED: { status: 429, grpc: GRPC.RESOURCE_EXHAUSTED, message: 'Too many requests' },
  HUB_ERR_INTERNAL: { status: 500, grpc: GRPC.INTERNAL, message: 'Internal error' },
  HUB_ERR_SPAWN_FAILED: { status: 500, grpc: GRPC.INTERNAL, message: 'Spawn failed' },
  HUB_ERR_PROXY_BAD_RESPONSE: { status: 502, grpc: GRPC.UNAVAILABLE, message: 'The server sent an invalid response' },
  HUB_ERR_ACTOR_UNAVAILABLE: { status: 503, grpc: GRPC.UNAVAILABLE, message: 'Not available, try again shortly' },
  HUB_ERR_ACTOR_TIMEOUT: { status: 504, grpc: GRPC.DEADLINE_EXCEEDED, message: 'Did not answer in time' },
  // RFC 6749 §5.2 errors of the token endpoint: the code names the OAuth error
  HUB_ERR_OAUTH_INVALID_REQUEST: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'invalid_request' },
  HUB_ERR_OAUTH_INVALID_CLIENT: { status: 401, grpc: GRPC.UNAUTHENTICATED, message: 'invalid_client' },
  HUB_ERR_OAUTH_INVALID_GRANT: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'invalid_grant' },
  HUB_ERR_OAUTH_UNAUTHORIZED_CLIENT: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'unauthorized_client' },
  HUB_ERR_OAUTH_UNSUPPORTED_GRANT_TYPE: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'unsupported_grant_type' },
  HUB_ERR_OAUTH_INVALID_SCOPE: { status: 400, grpc: GRPC.INVALID_ARGUMENT, message: 'invalid_scope' },
  // RFC 6750 §3.1 (userinfo): the access token is not one this request may use
  HUB_ERR_OAUTH_INVALID_TOKEN: { status: 401, grpc: GRPC.UNAUTHENTICATED, message: 'invalid_token' },
} as const satisfies Record<string, { status: number; grpc: number; message: string }>;

export type ErrorCode = keyof typeof CATALOGUE;
type CodeWithStatus<S extends number> = { [C in ErrorCode]: (typeof CATALOGUE)[C]['status'] extends S ? C : never }[ErrorCode];

export class HubError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, message: string = CATALOGUE[code].message, options: HubErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'HubError';
    this.code = code;
    this.status = CATALOGUE[code].status;
    this.retryable = options.retryable ?? (this.status === 503 || this.status === 504);
    this.headers = options.headers ?? {};
  }

  toJSON(): { status: number; code: string; message: string; retryable: boolean; headers?: Record<string, string> } {
    const headers = Object.keys(this.headers).length ? this.headers : undefined;
    return { status: this.status, code: this.code, message: this.message, retryable: this.retryable, headers };
  }
}

const isCode = (c: unknown): c is ErrorCode => typeof c === 'string' && Object.hasOwn(CATALOGUE, c);

/** Shorthands by status; the code narrows what the error is (it must be one of that status in the catalogue). */
export const errors = {
  badRequest: (message: string, code: CodeWithStatus<400> = 'HUB_ERR_REQUEST_INVALID') => new HubError(code, message),
  unauthorized: (message?: string) => new HubError('HUB_ERR_AUTH_REQUIRED', message),
  forbidden: (message?: string, code: CodeWithStatus<403> = 'HUB_ERR_AUTH_FORBIDDEN') => new HubError(code, message),
  notFound: (message?: string, code: CodeWithStatus<404> = 'HUB_ERR_NOT_FOUND') => new HubError(code, message),
  methodNotAllowed: (message?: string) => new HubError('HUB_ERR_METHOD_NOT_ALLOWED', message),
  conflict: (message: string, code: CodeWithStatus<409> = 'HUB_ERR_CONFLICT') => new HubError(code, message),
  tooManyNames: (count: number, what: string, limit: number) =>
    new HubError('HUB_ERR_REQUEST_TOO_LARGE', `${count} ${what} in one request: at most ${limit} (Hub.max_names_per_request); send them in several requests`),
  bodyTooLarge: (limit: number) => new HubError('HUB_ERR_REQUEST_TOO_LARGE', `Request body is larger than the limit of ${limit} bytes`),
  tooManyRequests: (message: string, retryAfterSeconds: number) =>
    new HubError('HUB_ERR_RATE_LIMITED', message, { headers: { 'Retry-After': String(retryAfterSeconds) } }),
  internal: (cause?: unknown) => new HubError('HUB_ERR_INTERNAL', undefined, { cause }),
  spawnFailed: (message: string) => new HubError('HUB_ERR_SPAWN_FAILED', message),
  unavailable: (what: string, cause?: unknown) =>
    new HubError('HUB_ERR_ACTOR_UNAVAILABLE', `${what} is not available, try again shortly`, { cause }),
  /** a proxied target answered with something that is not an acceptable HTTP response */
  badGateway: (what: string, cause?: unknown) => new HubError('HUB_ERR_PROXY_BAD_RESPONSE', `${what} sent an invalid response`, { cause }),
  timeout: (what: string, cause?: unknown) => new HubError('HUB_ERR_ACTOR_TIMEOUT', `${what} did not answer in time`, { cause }),
  /** An OAuth 2 error (RFC 6749 §5.2): the code is `HUB_ERR_OAUTH_<ERROR>`, so the token endpoint can name it again. */
  oauth: (error: OAuthErrorName, message: string) => new HubError(`HUB_ERR_OAUTH_${error.toUpperCase()}` as ErrorCode, message),
} as const;

export type OAuthErrorName = 'invalid_request' | 'invalid_client' | 'invalid_grant' | 'unauthorized_client' | 'unsupported_grant_type' | 'invalid_scope' | 'invalid_token';

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
  return JSON.stringify({ status: err.status, message: err.message, code: err.code });
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

/** The HubError as a gRPC status; `details` carries the whole error so the caller can rebuild it. */
export function toGrpcStatus(err: HubError): { code: number; details: string } {
  return { code: CATALOGUE[err.code].grpc, details: JSON.stringify(err.toJSON()) };
}

export function fromGrpcStatus(e: { code?: number; details?: string }, what: string): HubError {
  try {
    const body = JSON.parse(e.details ?? '');
    if (isCode(body?.code)) return new HubError(body.code, String(body.message), { retryable: Boolean(body.retryable), headers: body.headers });
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
  const code = headers?.get(NATS_ERROR_HEADERS.code);
  return new HubError(isCode(code) ? code : status >= 500 ? 'HUB_ERR_INTERNAL' : 'HUB_ERR_REQUEST_INVALID', headers?.get(NATS_ERROR_HEADERS.message) || undefined);
}

export function fromNatsRequestError(e: unknown, what: string): HubError {
  const code = (e as { code?: string })?.code;
  if (code === '503') return errors.unavailable(what, e); // no responders: the actor is restarting
  if (code === 'TIMEOUT' || code === 'REQUEST_TIMEOUT') return errors.timeout(what, e);
  return asHubError(e);
}
