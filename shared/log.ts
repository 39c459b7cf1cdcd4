// One pino root per process, bound to the actor; children per request. Secrets never reach a log line.
// Inside an actor's gRPC handler every line also names the request it serves (shared/context.ts).
import { createRequire } from 'node:module';
import { pino, type DestinationStream, type Logger } from 'pino';
import { currentRequest } from './context.js';

export type { Logger };

/** Paths whose values are replaced before a line is written. */
export const REDACTED_PATHS = [
  'authorization', 'cookie', 'token', 'password', 'secret', 'api_token', 'client_secret', 'cookie_secret', 'access_token',
  '*.authorization', '*.cookie', '*.token', '*.password', '*.secret', '*.api_token', '*.client_secret', '*.cookie_secret', '*.access_token',
  'headers.authorization', 'headers.cookie', 'headers["set-cookie"]',
  '*.headers.authorization', '*.headers.cookie', '*.headers["set-cookie"]',
];

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
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
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
