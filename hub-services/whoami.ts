// whoami: a hub service that shows the hub's user model of whoever visits it, through the hub's OAuth.
// Listens on HUB_SERVICE_URL and serves under HUB_SERVICE_PREFIX (the gateway forwards /services/whoami/…).
// Config (externally managed; the hub proxies to its url and registers it as OAuth client "service-whoami"):
//   Hub.services: [{"name": "whoami", "url": "http://127.0.0.1:10101", "api_token": "<more than 8 characters>"}]
// and run it with the HUB_* environment the hub gives its services (see README, "Services").
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { HubOAuth, hubOAuthConfigFromEnv, HubUnavailable } from '../shared/hub-oauth-client.js';
import { createLogger } from '../shared/log.js';

const log = createLogger('whoami');
const config = hubOAuthConfigFromEnv({
  ...process.env,
  // a service without an explicit list is reachable with its own access scope
  HUB_OAUTH_ACCESS_SCOPES: process.env.HUB_OAUTH_ACCESS_SCOPES ?? JSON.stringify([`access:services!service=${process.env.HUB_SERVICE_NAME ?? 'whoami'}`]),
});
const listenUrl = new URL(process.env.HUB_SERVICE_URL ?? 'http://127.0.0.1:10101');
const auth = new HubOAuth(config, log);

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body, null, 2)}\n`;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' }).end(text);
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  if (!path.startsWith(config.prefix) && `${path}/` !== config.prefix) return json(res, 404, { status: 404, message: 'Not Found' });
  if (auth.isCallback(req)) return auth.handleCallback(req, res);
  const me = await auth.authenticate(req, res);
  if (me) json(res, 200, me);
}

const server = createServer((req, res) => {
  handle(req, res).catch((err) => {
    log.error({ event: 'whoami.request_failed', err: (err as Error).message }, 'request failed');
    if (!res.headersSent) json(res, err instanceof HubUnavailable ? 502 : 500, { status: err instanceof HubUnavailable ? 502 : 500, message: 'The hub could not be asked' });
  });
});

server.listen(Number(listenUrl.port), listenUrl.hostname, () => log.info({ event: 'whoami.listening', url: listenUrl.href, prefix: config.prefix }, 'listening'));

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
