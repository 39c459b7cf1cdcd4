// Tokens' `last_activity`, taken from the API requests this gateway identifies. A request only sets its
// token id's time in a map (no I/O); once a second the used ids go to the tokens actor on
// hub.tokens.activity as {tokens: {"a12": "<ISO time>"}}, which shows them at once and writes them in batches.
import type { Logger } from '../../shared/log.js';
import { encodeJson, type NatsConnection } from '../../shared/nats.js';
import { subjects } from '../../shared/subjects.js';

/** Token ids per message, so one message stays far below NATS's 1 MB payload limit. */
const IDS_PER_MESSAGE = 5000;
const FLUSH_MS = 1000;

export function createTokenActivity(nc: NatsConnection, log: Logger) {
  let used = new Map<string, number>();

  function flush(): void {
    if (!used.size) return;
    const batch = [...used];
    used = new Map();
    for (let i = 0; i < batch.length; i += IDS_PER_MESSAGE) {
      const tokens: Record<string, string> = {};
      for (const [id, ms] of batch.slice(i, i + IDS_PER_MESSAGE)) tokens[id] = new Date(ms).toISOString();
      try {
        nc.publish(subjects.command('tokens', 'activity'), encodeJson({ tokens }));
      } catch (e) {
        log.warn({ event: 'tokens.activity.publish_failed', err: (e as Error).message }, 'token activity not published');
      }
    }
  }

  const timer = setInterval(flush, FLUSH_MS);
  timer.unref();

  return {
    /** A token was used now (cookie logins have no token id and are not counted). */
    touch(tokenId: string): void {
      if (tokenId) used.set(tokenId, Date.now());
    },
    stop(): void {
      clearInterval(timer);
      flush();
    },
  };
}

export type TokenActivity = ReturnType<typeof createTokenActivity>;
