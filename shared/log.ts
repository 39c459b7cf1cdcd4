// One pino root per process, bound to the actor; children per request. Secrets never reach a log line.
import { pino, type Logger } from 'pino';

export type { Logger };

/** Paths whose values are replaced before a line is written. */
export const REDACTED_PATHS = [
  'authorization', 'cookie', 'token', 'password', 'secret', 'api_token', 'client_secret', 'cookie_secret', 'access_token',
  '*.authorization', '*.cookie', '*.token', '*.password', '*.secret', '*.api_token', '*.client_secret', '*.cookie_secret', '*.access_token',
  'headers.authorization', 'headers.cookie', 'headers["set-cookie"]',
  '*.headers.authorization', '*.headers.cookie', '*.headers["set-cookie"]',
];

export function createLogger(actor: string, level = 'info'): Logger {
  return pino({
    level,
    base: { actor, pid: process.pid },
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}

/** Untrusted strings (paths, user agents) are capped before they are logged. */
export function cap(s: string, max = 200): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}
