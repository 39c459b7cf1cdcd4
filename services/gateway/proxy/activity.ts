// `last_activity` of routes, taken from the traffic this gateway forwards. A request only stamps its
// route (no allocation after the first stamp of an interval); once per `Hub.activity_resolution` the
// stamped routes go out on hub.evt.activity.proxy as {routes: {"<routespec>": "<ISO time>"}}, where the
// spawner (server activity) and the proxy-router (GET /hub/api/proxy) pick them up.
import type { Logger } from '../../../shared/log.js';
import { encodeJson, type NatsConnection } from '../../../shared/nats.js';
import { subjects } from '../../../shared/subjects.js';
import type { RouteEntry } from './table.js';

/** Routes per message, so one message stays far below NATS's 1 MB payload limit. */
const ROUTES_PER_MESSAGE = 2000;

export function createActivityRecorder(nc: NatsConnection, intervalMs: number, log: Logger) {
  let stamped: RouteEntry[] = [];

  function flush(): void {
    if (!stamped.length) return;
    const batch = stamped;
    stamped = [];
    for (let i = 0; i < batch.length; i += ROUTES_PER_MESSAGE) {
      const routes: Record<string, string> = {};
      for (const e of batch.slice(i, i + ROUTES_PER_MESSAGE)) {
        routes[e.route.routespec] = new Date(e.lastActivity).toISOString();
        e.lastActivity = 0;
      }
      try {
        nc.publish(subjects.event('activity', 'proxy'), encodeJson({ routes }));
      } catch (e) {
        log.warn({ event: 'proxy.activity.publish_failed', err: (e as Error).message }, 'activity not published');
      }
    }
  }

  const timer = setInterval(flush, Math.max(1000, intervalMs));
  timer.unref();

  return {
    touch(entry: RouteEntry): void {
      if (entry.lastActivity === 0) stamped.push(entry);
      entry.lastActivity = Date.now();
    },
    flush,
    stop(): void {
      clearInterval(timer);
      flush();
    },
  };
}

export type ActivityRecorder = ReturnType<typeof createActivityRecorder>;
