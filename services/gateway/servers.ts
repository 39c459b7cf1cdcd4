// The gateway's copy of the spawner's registry, kept by watching the `hub_servers` KV bucket:
// user models, state filters and progress streams read it without asking anyone.
import type { Logger } from '../../shared/log.js';
import { decodeJson, type NatsConnection } from '../../shared/nats.js';
import { isActive, parseServerKey, SERVERS_BUCKET, type ServerRecord } from '../../shared/servers.js';

type Listener = (record: ServerRecord | null) => void;

export async function createServerMirror(nc: NatsConnection, log: Logger, initTimeoutMs: number) {
  const byUser = new Map<string, Map<string, ServerRecord>>();
  const listeners = new Map<string, Set<Listener>>();
  const kv = await nc.jetstream().views.kv(SERVERS_BUCKET, { history: 1 });
  let initialized!: () => void;
  const ready = new Promise<void>((resolve) => { initialized = resolve; });
  const watch = await kv.watch({ initializedFn: () => initialized() });

  const keyOf = (user: string, name: string) => JSON.stringify([user, name]);

  function apply(user: string, name: string, record: ServerRecord | null): void {
    let mine = byUser.get(user);
    if (record) {
      if (!mine) byUser.set(user, (mine = new Map()));
      mine.set(name, record);
    } else if (mine) {
      mine.delete(name);
      if (!mine.size) byUser.delete(user);
    }
    for (const l of listeners.get(keyOf(user, name)) ?? []) l(record);
  }

  void (async () => {
    for await (const e of watch) {
      const id = parseServerKey(e.key);
      if (!id) continue;
      apply(id.user, id.name, e.operation === 'PUT' ? decodeJson<ServerRecord>(e.value) : null);
    }
    log.warn({ event: 'gateway.servers_watch.ended' }, 'server registry watch ended');
  })();
  // A gateway serves user models only once it has the whole registry.
  await Promise.race([ready, new Promise((r) => setTimeout(r, initTimeoutMs))]);

  return {
    get: (user: string, name: string): ServerRecord | undefined => byUser.get(user)?.get(name),
    /** a user's records, active or the last failed start */
    of: (user: string): ServerRecord[] => [...(byUser.get(user)?.values() ?? [])],
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
    stop: () => watch.stop(),
    isActive,
  };
}

export type ServerMirror = Awaited<ReturnType<typeof createServerMirror>>;
