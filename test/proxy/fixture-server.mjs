// A single-user server stand-in for proxy tests: says who it is, streams slowly on <prefix>slow, lists
// every request it was sent on /__seen (asked of it directly, not through the hub: what reached it),
// and on SIGINT/SIGTERM stops taking connections but finishes the responses in flight.
import { createServer } from 'node:http';

const url = new URL(process.env.HUB_SERVICE_URL);
const seen = [];
const server = createServer((req, res) => {
  if (req.url === '/__seen') {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify(seen));
  }
  seen.push({ url: req.url, authorization: req.headers.authorization ?? '', cookie: req.headers.cookie ?? '' });
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
