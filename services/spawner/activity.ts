// Activity of servers (from their own reports and from proxied traffic) is buffered and written to the
// registry at most once per interval: per-request writes would cost the bucket far more than it can take.
import type { ServerRecord } from '../../shared/servers.js';

export interface ActivityBuffer {
  /** one server's activity at `at` (ISO); only the newest per server is kept */
  note(user: string, name: string, at: string): void;
  /** `{routes: {"<routespec>": "<ISO time>"}}` from the gateways, mapped to servers by their url */
  noteRoutes(routes: Record<string, string>, servers: Iterable<ServerRecord>): void;
  /** writes what is pending now (at shutdown) */
  flush(): Promise<void>;
  stop(): void;
}

export function createActivityBuffer(record: (entries: { user: string; name: string; at: string }[]) => Promise<void>, intervalMs: number): ActivityBuffer {
  const pending = new Map<string, { user: string; name: string; at: string }>();
  const note = (user: string, name: string, at: string) => {
    const key = JSON.stringify([user, name]);
    if (at > (pending.get(key)?.at ?? '')) pending.set(key, { user, name, at });
  };
  const flush = async () => {
    const batch = [...pending.values()];
    pending.clear();
    if (batch.length) await record(batch);
  };
  const timer = setInterval(() => void flush(), intervalMs);
  timer.unref();
  return {
    note,
    noteRoutes(routes, servers) {
      const byUrl = new Map([...servers].map((r) => [r.url, r]));
      for (const [spec, at] of Object.entries(routes)) {
        const r = byUrl.get(spec);
        if (r && typeof at === 'string') note(r.user, r.name, at);
      }
    },
    flush,
    stop: () => clearInterval(timer),
  };
}
