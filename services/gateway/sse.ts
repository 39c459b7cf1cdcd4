// Server-sent events over a uWS response: headers once, `data:` lines as they come, keepalive
// comments while waiting, and a clean end. Writes after the client left are dropped.
import type { Reply } from './http.js';
import { drain } from './drain.js';

export interface SseStream {
  send(event: unknown): void;
  end(): void;
  onClose(fn: () => void): void;
}

export function startSse(reply: Reply, keepaliveMs: number): SseStream {
  const res = reply.res;
  const closers: (() => void)[] = [];
  let open = true;
  reply.done = true; // this response is ours now: Reply.send must not write another
  reply.status = 200;
  drain.begin(); // an event stream is kept by a replaced gateway until it ends (drain.ts)
  const close = () => {
    if (!open) return;
    open = false;
    drain.end();
    clearInterval(keepalive);
    closers.forEach((fn) => fn());
  };
  res.onAborted(() => { reply.aborted = true; close(); });
  res.cork(() => {
    res.writeStatus('200 OK');
    res.writeHeader('Content-Type', 'text/event-stream');
    res.writeHeader('Cache-Control', 'no-cache');
    res.writeHeader('X-Accel-Buffering', 'no');
    if (drain.draining) res.writeHeader('Connection', 'close');
    res.write(':\n\n'); // the headers go out now, not with the first event
  });
  const write = (chunk: string) => {
    if (open && !reply.aborted) res.cork(() => res.write(chunk));
  };
  const keepalive = setInterval(() => write(': keepalive\n\n'), keepaliveMs);
  return {
    send: (event) => write(`data: ${JSON.stringify(event)}\n\n`),
    end() {
      if (open && !reply.aborted) res.cork(() => res.end());
      close();
    },
    onClose: (fn) => void closers.push(fn),
  };
}
