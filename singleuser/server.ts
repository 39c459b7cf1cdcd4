// This project's own single-user server: what the spawner runs by default. It serves under its prefix,
// lets in API clients whose hub token grants access to this server and browsers logged in through the
// hub's OAuth (shared/hub-oauth-client.ts), and reports activity.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { HubOAuth, hubOAuthConfigFromEnv, HubUnavailable } from '../shared/hub-oauth-client.js';
import { createLogger } from '../shared/log.js';

const env = (k: string): string => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set: single-user servers are started by the hub's spawner`);
  return v;
};

const prefix = env('HUB_SERVICE_PREFIX');
const serviceUrl = new URL(env('HUB_SERVICE_URL'));
const apiToken = env('HUB_API_TOKEN');
const user = env('HUB_USER');
const serverName = process.env.HUB_SERVER_NAME ?? '';
const activityUrl = process.env.HUB_ACTIVITY_URL;
const activityIntervalMs = Number(process.env.HUB_ACTIVITY_INTERVAL ?? 300) * 1000;
const log = createLogger('singleuser').child({ user, server: serverName });
// browsers log in through the hub's OAuth; API clients send `Authorization: token <t>` (see shared/hub-oauth-client.ts)
const hubAuth = new HubOAuth(hubOAuthConfigFromEnv(), log);

const startedAt = new Date().toISOString();
/** The hub's home page, linked from this server's pages (the way back); at the hub's own host (HUB_HOST) with per-user subdomains. */
const hubHome = `${process.env.HUB_HOST ?? ''}${(process.env.HUB_BASE_URL || '/').replace(/\/?$/, '/')}hub/home`;
let lastActivity = startedAt;
let reportedActivity = '';

function send(res: ServerResponse, status: number, body: unknown, type = 'application/json'): void {
  const text = type === 'application/json' ? JSON.stringify(body) : String(body);
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) }).end(text);
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (!url.pathname.startsWith(prefix) && `${url.pathname}/` !== prefix) return send(res, 404, { status: 404, message: 'Not Found' });
  const rest = url.pathname.slice(prefix.length);
  if (rest === 'api' || rest === 'api/') return send(res, 200, { version: '1', user, server_name: serverName }); // unauthenticated, like the established servers
  if (hubAuth.isCallback(req)) return hubAuth.handleCallback(req, res);
  const who = await hubAuth.authenticate(req, res);
  if (!who) return; // answered: a redirect to log in, or a 403
  lastActivity = new Date().toISOString();
  if (rest === 'api/status') return send(res, 200, { user, server_name: serverName, started: startedAt, last_activity: lastActivity, requested_by: who.name });
  send(res, 200, `<!doctype html><title>${escapeHtml(user)}</title><h1>Server of ${escapeHtml(user)}${serverName ? ` (${escapeHtml(serverName)})` : ''}</h1><p>Hello, ${escapeHtml(who.name)}.</p><p><a id="hub-home" href="${escapeHtml(hubHome)}">Back to the hub</a></p>`, 'text/html; charset=utf-8');
}

const server = createServer((req, res) => {
  handle(req, res).catch((err) => {
    log.error({ event: 'request.failed', err: (err as Error).message }, 'request failed');
    if (!res.headersSent) send(res, err instanceof HubUnavailable ? 502 : 500, { status: err instanceof HubUnavailable ? 502 : 500, message: 'The hub could not be asked about this request' });
  });
});

/** Reports activity to the hub when it moved, with a bounded retry; the hub keeps only the latest. */
async function reportActivity(): Promise<void> {
  if (!activityUrl || lastActivity === reportedActivity) return;
  const at = lastActivity;
  const body = JSON.stringify({ last_activity: at, servers: { [serverName]: { last_activity: at } } });
  for (let attempt = 0, delay = 1000; attempt < 5; attempt++, delay = Math.min(delay * 2, 60_000)) {
    try {
      const r = await fetch(activityUrl, { method: 'POST', headers: { authorization: `token ${apiToken}`, 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(10_000) });
      if (r.ok) {
        reportedActivity = at;
        return;
      }
      log.warn({ event: 'activity.rejected', status: r.status }, 'hub refused activity');
      return;
    } catch (e) {
      log.warn({ event: 'activity.failed', err: (e as Error).message, attempt }, 'activity not delivered');
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

const jitter = () => activityIntervalMs * (0.9 + Math.random() * 0.2);
let activityTimer = setTimeout(function tick() {
  void reportActivity().finally(() => { activityTimer = setTimeout(tick, jitter()); });
}, jitter());

server.listen(Number(serviceUrl.port), serviceUrl.hostname, () => log.info({ event: 'singleuser.listening', url: serviceUrl.href }, 'listening'));

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    clearTimeout(activityTimer);
    log.info({ event: 'singleuser.stopping', signal }, 'stopping');
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
