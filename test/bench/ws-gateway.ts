// A gateway's WebSocket relay alone, for `npm run bench ws-relay`: uWS + the proxy module of the checkout
// named by argv[2] (this one, or a baseline's worktree) routing /services/bench/ to the echo backend on
// argv[3]. Prints its port as its first line; its CPU per round trip is measured by the parent.
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import uWS from 'uWebSockets.js';

const [dir, backendPort] = [resolve(process.argv[2]), Number(process.argv[3])];
const load = (path: string) => import(pathToFileURL(join(dir, path)).href);
const { createProxy } = await load('services/gateway/proxy/index.ts');
const { RouteTable } = await load('services/gateway/proxy/table.ts');
const { createActivityRecorder } = await load('services/gateway/proxy/activity.ts');
const { createLogger } = await load('shared/log.ts');

const table = new RouteTable();
table.set({ routespec: '/services/bench/', target: `http://127.0.0.1:${backendPort}`, data: { service: 'bench' } });
const nc = { publish: () => undefined }; // activity is recorded in memory and never sent within a run
const log = createLogger('bench', 'silent');
const proxy = createProxy({ routes: () => table, activity: createActivityRecorder(nc, 3_600_000, log), nc, log, connectTimeoutMs: 5000, idleTimeoutMs: 60_000 });
const app = uWS.App().ws('/*', proxy.websocket).any('/*', (res, req) => {
  if (!proxy.handle(res, req)) res.writeStatus('404 Not Found').end();
});
app.listen('127.0.0.1', 0, (socket) => {
  if (!socket) throw new Error('the relay could not listen');
  console.log(uWS.us_socket_local_port(socket as unknown as uWS.us_socket));
});
process.on('SIGTERM', () => process.exit(0)); // lets --cpu-prof write its profile
