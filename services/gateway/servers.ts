// The gateway's copy of the spawner's registry (the `hub_servers` KV bucket, through the shared mirror):
// user models, state filters, progress streams and the routes to user servers all read it without asking anyone.
import type { Logger } from '../../shared/log.js';
import { decodeJson, encodeJson, type NatsConnection } from '../../shared/nats.js';
import { subjects } from '../../shared/subjects.js';
import { isActive, mirrorServers, parseServerKey, type ServerRecord } from '../../shared/servers.js';

type Listener = (record: ServerRecord | null) => void;

export async function createServerMirror(nc: NatsConnection, log: Logger, loadTimeoutMs: number) {
  const mirror = await mirrorServers(nc, log, loadTimeoutMs);
  const byUser = new Map<string, Map<string, ServerRecord>>();
  const listeners = new Map<string, Set<Listener>>();
  const keyOf = (user: string, name: string) => JSON.stringify([user, name]);

  function index(record: ServerRecord | null, id: { user: string; name: string }): void {
    let mine = byUser.get(id.user);
    if (record) {
      if (!mine) byUser.set(id.user, (mine = new Map()));
      mine.set(id.name, record);
    } else if (mine) {
      mine.delete(id.name);
      if (!mine.size) byUser.delete(id.user);
    }
    for (const l of listeners.get(keyOf(id.user, id.name)) ?? []) l(record);
  }
  function rebuild(): void {
    const before = [...byUser.values()].flatMap((m) => [...m.values()]);
    byUser.clear();
    for (const r of mirror.values()) index(r, r);
    for (const r of before) if (!byUser.get(r.user)?.has(r.name)) index(null, r);
  }
  rebuild();
  // The spawner announces a server ready only after every gateway says its copy has the write (shared/nats.ts
  // gatewaysHaveApplied): answered here, by every gateway (no queue group), once this copy has it.
  const applied = nc.subscribe(subjects.command('gateway', 'servers-applied'), {
    callback: (_e, m) => {
      const { revision, wait_ms: waitMs } = decodeJson<{ revision?: number; wait_ms?: number }>(m.data) ?? {};
      if (typeof revision !== 'number' || !m.reply) return;
      void mirror.waitForRevision(revision, Math.min(Number(waitMs) || 1000, 10_000)).then((ok) => {
        if (ok) m.respond(encodeJson({ revision: mirror.revision }));
      });
    },
  });
  mirror.listen((c) => {
    if (c.kind === 'reset') return rebuild();
    const id = parseServerKey(c.key);
    if (id) index(c.kind === 'put' ? c.value : null, id);
  });

  return {
    get: (user: string, name: string): ServerRecord | undefined => byUser.get(user)?.get(name),
    /** a user's records, active or the last failed start */
    of: (user: string): ServerRecord[] => [...(byUser.get(user)?.values() ?? [])],
    all: (): IterableIterator<ServerRecord> => mirror.values(),
    usersWith: (test: (r: ServerRecord) => boolean): string[] =>
      [...byUser].filter(([, servers]) => [...servers.values()].some(test)).map(([user]) => user),
    /** calls `fn` with every change of one server (null when it is gone); returns the unsubscribe */
    watch(user: string, name: string, fn: Listener): () => void {
      const key = keyOf(user, name);
      let set = listeners.get(key);
      if (!set) listeners.set(key, (set = new Set()));
      set.add(fn);
      return () => {
        set!.delete(fn);
        if (!set!.size) listeners.delete(key);
      };
    },
    /** every change of any server, and `null` after a reload replaced the copy */
    listen: (fn: (record: ServerRecord | null, previous?: ServerRecord) => void) => mirror.listen((c) => {
      if (c.kind === 'reset') fn(null);
      else if (c.kind === 'put') fn(c.value);
      else if (c.previous) fn({ ...c.previous, state: 'stop', target: '' }, c.previous);
    }),
    waitForRevision: (revision: number, timeoutMs: number) => mirror.waitForRevision(revision, timeoutMs),
    get revision() {
      return mirror.revision;
    },
    reload: () => mirror.reload(),
    staleMs: () => mirror.staleMs(),
    stop: () => {
      applied.unsubscribe();
      mirror.stop();
    },
    isActive,
  };
}

export type ServerMirror = Awaited<ReturnType<typeof createServerMirror>>;
