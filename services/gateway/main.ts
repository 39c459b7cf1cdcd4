// Gateway actor: the only public listener. Wiring only; see app.ts for the routes.
import uWS from 'uWebSockets.js';
import { runActor } from '../../shared/actor.js';
import { createApp } from './app.js';
import { createHealthChecker } from './health.js';
import { UWS_BUILD } from './http.js';

await runActor('gateway', async (ctx) => {
  if (UWS_BUILD !== 'native') throw new Error('uWebSockets.js native binary did not load (fallback shim in use): reinstall with `npm ci` on Node 20');
  const { ip, port } = ctx.config.Hub;
  const health = createHealthChecker(ctx.config.Hub.data_dir, ctx.config.Hub.health_timeout * 1000);
  const app = createApp({ ctx, health });
  const listenSocket = await new Promise<uWS.us_listen_socket>((resolve, reject) =>
    app.listen(ip, port, (s) => (s ? resolve(s) : reject(new Error(`gateway cannot listen on ${ip}:${port} (in use?)`)))));
  ctx.log.info({ event: 'gateway.listening', ip, port, uws: UWS_BUILD }, `listening on http://${ip}:${port}`);
  return {
    details: () => ({ uws: UWS_BUILD, listen: `${ip}:${port}` }),
    stopIntake: () => uWS.us_listen_socket_close(listenSocket),
    close: () => health.close(),
  };
});
