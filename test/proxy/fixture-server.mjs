// A single-user server stand-in for proxy tests: says who it is, streams slowly on <prefix>slow,
// and on SIGINT/SIGTERM stops taking connections but finishes the responses in flight.
import { createServer } from 'node:http';

const url = new URL(process.env.HUB_SERVICE_URL);
const server = createServer((req, res) => {
  if (req.url.endsWith('/slow')) {
    res.writeHead(200, { 'content-type': 'text/plain' });
    let n = 0;
    const timer = setInterval(() => {
      res.write(`chunk ${n}\n`);
      if (++n === 10) {
        clearInterval(timer);
        res.end();
      }
    }, 100);
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ user: process.env.HUB_USER, server: process.env.HUB_SERVER_NAME, url: req.url, pid: process.pid }));
});
server.listen(Number(url.port), url.hostname);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeIdleConnections();
  });
}
