// The program both hubs spawn in `npm run bench spawn`: a minimal HTTP server on the address its hub gives
// (HUB_SERVICE_URL here, JUPYTERHUB_SERVICE_URL for the established hub), answering 200 everywhere.
import { createServer } from 'node:http';

const url = new URL(process.env.HUB_SERVICE_URL || process.env.JUPYTERHUB_SERVICE_URL);
createServer((_req, res) => res.end('ok\n')).listen(Number(url.port), url.hostname);
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => process.exit(0));
