// One pino root per process, bound to the actor; children per request. Secrets never reach a log line.
// Inside an actor's gRPC handler every line also names the request it serves (shared/context.ts).
import { createRequire } from 'node:module';
import { pino, type DestinationStream, type Logger } from 'pino';
import { currentRequest } from './context.js';

export type { Logger };

/**
 * Keys whose values are replaced before a line is written: on the line itself and one object down, and in a
 * `headers` object at either level (`headers.authorization`, `err.headers.cookie`). Done by hand (`redactLine`):
 * pino's own `redact` with these as `*.`-wildcard paths cost ~18 µs of CPU per line (measured 2026-11-25: a
 * gateway request's line 22 µs against 4 µs), as much as the rest of a request the gateway answers from memory.
 */
export const SECRET_KEYS: ReadonlySet<string> = new Set([
  'authorization', 'cookie', 'token', 'password', 'secret', 'api_token', 'client_secret', 'cookie_secret', 'access_token',
]);
const SECRET_HEADERS: ReadonlySet<string> = new Set(['authorization', 'cookie', 'set-cookie']);
const CENSOR = '[redacted]';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;
/** A copy with the same prototype and every own property (an Error keeps its message and stack). */
const copyOf = <T extends object>(o: T): T => Object.defineProperties(Object.create(Object.getPrototypeOf(o)) as T, Object.getOwnPropertyDescriptors(o));

/** `o` itself when it holds no secret (no allocation: the usual case), else a copy with the secrets censored. */
function redactLevel(o: Record<string, unknown>, nested: boolean): Record<string, unknown> {
  let out: Record<string, unknown> | undefined;
  for (const k of Object.keys(o)) {
    const v = o[k];
    let censored = v;
    if (SECRET_KEYS.has(k)) censored = CENSOR;
    else if (k === 'headers' && isObject(v)) {
      for (const h of Object.keys(v)) if (SECRET_HEADERS.has(h)) (censored === v ? (censored = copyOf(v)) : censored as Record<string, unknown>)[h] = CENSOR;
    } else if (!nested && isObject(v)) censored = redactLevel(v, true);
    if (censored !== v) (out ??= copyOf(o))[k] = censored;
  }
  return out ?? o;
}

/** What is written of a line's fields: secrets censored, the caller's objects untouched. */
export const redactLine = (o: Record<string, unknown>): Record<string, unknown> => redactLevel(o, false);

/**
 * A child logger's bindings are not formatted by pino, only serialized key by key: these censor the secret keys
 * and `headers` there (on lines, `redactLine` has already done it).
 */
const bindingSerializers: Record<string, (v: unknown) => unknown> = {
  ...Object.fromEntries([...SECRET_KEYS].map((k) => [k, () => CENSOR])),
  headers: (v) => (isObject(v) ? redactLevel({ headers: v }, true).headers : v),
};

export type LogFormat = 'json' | 'pretty';

/** `Hub.log_format`: "pretty" or "json"; "auto" (the default) is pretty on a terminal, JSON lines otherwise. */
export function resolveLogFormat(configured = 'auto', isTTY = Boolean(process.stdout.isTTY)): LogFormat {
  if (configured === 'pretty' || configured === 'json') return configured;
  return isTTY ? 'pretty' : 'json';
}

const NO_CONTEXT = Object.freeze({});

/** The request a line was written for, when the code runs for one (no allocation otherwise). */
function requestFields(): object {
  const r = currentRequest();
  return r ? { reqId: r.requestId, who: r.who } : NO_CONTEXT;
}

/** pino-pretty, loaded only when asked for, writing synchronously (no transport worker thread). */
function prettyStream(): DestinationStream {
  const pretty = createRequire(import.meta.url)('pino-pretty') as (o: object) => DestinationStream;
  return pretty({
    sync: true, colorize: Boolean(process.stdout.isTTY), translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,actor,node',
    messageFormat: '{actor}: {msg}', singleLine: true,
  });
}

/** `node`: `Hub.node_name`, on every line, so the logs of several nodes can be read together. */
export function createLogger(actor: string, level = 'info', format = 'auto', node?: string): Logger {
  const options = {
    level,
    base: node ? { actor, node, pid: process.pid } : { actor, pid: process.pid },
    formatters: { log: redactLine },
    serializers: { ...bindingSerializers, err: pino.stdSerializers.err },
    timestamp: pino.stdTimeFunctions.isoTime,
    mixin: requestFields,
    // the line's own fields win; with no request, nothing is copied (pino's default would write into NO_CONTEXT)
    mixinMergeStrategy: (line: object, mixin: object) => (mixin === NO_CONTEXT ? line : Object.assign(mixin, line)),
  };
  return resolveLogFormat(format) === 'pretty' ? pino(options, prettyStream()) : pino(options);
}

/** Untrusted strings (paths, user agents) are capped before they are logged. */
export function cap(s: string, max = 200): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** The level of a request's log line by its status: <400 info, <500 warn, else error. */
export function levelForStatus(status: number): 'info' | 'warn' | 'error' {
  return status < 400 ? 'info' : status < 500 ? 'warn' : 'error';
}
