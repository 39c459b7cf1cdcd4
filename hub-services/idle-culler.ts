// idle-culler: a hub service that stops single-user servers idle for longer than --timeout seconds.
// It uses only the REST API with its own token (HUB_API_TOKEN), so it needs a role of least privilege:
//   {"name": "idle-culler", "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"], "services": ["idle-culler"]}
// Run by the hub: Hub.services: [{"name": "idle-culler", "command": ["node", "dist/hub-services/idle-culler.js", "--timeout=3600"]}]
import { createLogger } from '../shared/log.js';

const arg = (name: string, dflt: number): number => {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  const v = hit ? Number(hit.slice(name.length + 3)) : dflt;
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} must be a positive number of seconds`);
  return v;
};

const timeoutS = arg('timeout', 3600);
const everyS = arg('every', Math.min(300, Math.max(1, timeoutS / 2)));
const api = process.env.HUB_API_URL;
const token = process.env.HUB_API_TOKEN;
if (!api || !token) throw new Error('HUB_API_URL and HUB_API_TOKEN must be set (the hub sets them for its services)');
const log = createLogger('idle-culler');
const headers = { authorization: `token ${token}`, accept: 'application/hub-pagination+json' };

interface ServerModel { name: string; ready: boolean; pending: string | null; started: string | null; last_activity: string | null }
interface UserModel { name: string; servers?: Record<string, ServerModel> }

/** Every user with a ready server, following the pagination envelope's next.url (bounded). */
async function readyUsers(): Promise<UserModel[]> {
  const out: UserModel[] = [];
  let url: string | null = `${api}/users?state=ready&limit=200`;
  for (let page = 0; url && page < 10_000; page++) {
    const r: Response = await fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
    if (!r.ok) throw new Error(`GET users: ${r.status}`);
    const body = await r.json();
    const items: UserModel[] = Array.isArray(body) ? body : body.items;
    for (const item of items) out.push(item);
    url = Array.isArray(body) ? null : body._pagination?.next?.url ?? null;
  }
  return out;
}

async function cull(): Promise<void> {
  const now = Date.now();
  for (const user of await readyUsers()) {
    for (const server of Object.values(user.servers ?? {})) {
      if (!server.ready || server.pending) continue;
      const last = Date.parse(server.last_activity ?? server.started ?? '');
      if (!Number.isFinite(last) || now - last < timeoutS * 1000) continue;
      const path = server.name ? `servers/${encodeURIComponent(server.name)}` : 'server';
      const r = await fetch(`${api}/users/${encodeURIComponent(user.name)}/${path}`, { method: 'DELETE', headers, signal: AbortSignal.timeout(60_000) });
      // 202: still stopping; it is looked at again next round
      log.info({ event: 'cull', user: user.name, server: server.name, idleSeconds: Math.round((now - last) / 1000), status: r.status }, 'culled idle server');
    }
  }
}

let running = true;
for (const s of ['SIGINT', 'SIGTERM'] as const) process.on(s, () => { running = false; process.exit(0); });
log.info({ event: 'idle-culler.start', timeoutS, everyS }, 'culling idle servers');
while (running) {
  await cull().catch((e) => log.warn({ event: 'cull.failed', err: (e as Error).message }, 'cull round failed'));
  await new Promise((r) => setTimeout(r, everyS * 1000));
}
