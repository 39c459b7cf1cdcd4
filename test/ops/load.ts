// Load for the zero-downtime test and bench (issue 24): steady GETs counting every answer that is not a 200, a
// proxy target with an echo WebSocket, and a WebSocket through the gateway that is used all along.
import http from 'node:http';
import WebSocket, { WebSocketServer } from 'ws';
import { listen } from '../proxy/helpers.js';

/** A steady load of GETs of one URL until stopped; every answer that is not a 200 counted, the slowest one timed. */
export function pathLoad(url: string, workers = 1, token?: string) {
  let running = true;
  const failures: string[] = [];
  let done = 0;
  /** the longest request and when it began (ms since the epoch) */
  const slowest = { ms: 0, at: 0 };
  const loops = Array.from({ length: workers }, async () => {
    while (running) {
      const began = Date.now();
      const t = performance.now();
      try {
        const r = await fetch(url, { headers: token ? { authorization: `token ${token}` } : {}, signal: AbortSignal.timeout(10_000) });
        await r.arrayBuffer();
        if (r.status !== 200) failures.push(`${url} ${r.status}`);
      } catch (e) {
        failures.push(`${url} ${(e as Error).message} ${String((e as { cause?: unknown }).cause ?? '')}`);
      }
      const ms = performance.now() - t;
      if (ms > slowest.ms) Object.assign(slowest, { ms, at: began });
      done++;
    }
  });
  return { stop: async () => { running = false; await Promise.all(loops); return { failures, done, slowest }; } };
}

/** A steady API load until stopped: GET /hub/api/users. */
export const apiLoad = (url: string, token: string, workers = 4) => pathLoad(`${url}/hub/api/users`, workers, token);

/** A target for the proxy: 200 "ok" for HTTP, and an echo WebSocket at <prefix>echo. */
export async function echoBackend(): Promise<{ server: http.Server; port: number }> {
  const server = http.createServer((_req, res) => res.end('ok'));
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }))));
  return { server, port: await listen(server) };
}

/** A WebSocket through the gateway that echoes; `roundTrip` sends a message and waits (bounded) for it back. */
export async function echoSocket(url: string) {
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => { ws.once('open', () => resolve()); ws.once('error', reject); });
  let closed: number | null = null;
  ws.on('close', (code) => { closed = code; });
  let n = 0;
  return {
    get closed() { return closed; },
    roundTrip: (timeoutMs = 5000) => new Promise<boolean>((resolve) => {
      const text = `m${n++}`;
      const timer = setTimeout(() => { ws.off('message', onMessage); resolve(false); }, timeoutMs);
      const onMessage = (data: WebSocket.RawData) => {
        if (data.toString() !== text) return;
        clearTimeout(timer);
        ws.off('message', onMessage);
        resolve(true);
      };
      ws.on('message', onMessage);
      ws.send(text);
    }),
    close: () => ws.close(),
  };
}
