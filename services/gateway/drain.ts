// A replaced gateway's drain (`hub restart`, shared/supervision.ts REPLACED_MESSAGE). Its successor listens on the
// shared port and this one's listen socket is closed, so new connections reach the successor; what this one still
// receives on open keep-alive connections it answers with `Connection: close` (each client moves over after one
// more answer), and it stays until its requests in flight, event streams and WebSockets are done (and no request
// came for longer than an idle connection lives), or Supervisor.drain_timeout passes.
import type { Logger } from '../../shared/log.js';

/**
 * After the last request, how long to wait for more before leaving. uWS closes a keep-alive connection that stays idle
 * for 10 s itself (clients close theirs sooner: Node's after 4 s), so once no request came for longer, every connection
 * still open is one that would have been closed anyway: leaving then races a client's next request no more than any
 * idle close does. (Leaving sooner reset a request written onto an idle connection as the process exited.)
 */
const QUIET_MS = 11_000;
const LOOK_EVERY_MS = 50;

let draining = false;
let inFlight = 0;
let sockets = 0;
let lastBegin = 0;

export const drain = {
  /** answers now say `Connection: close` */
  get draining(): boolean {
    return draining;
  },
  /** a request (or event stream) begins / has its whole answer or was aborted */
  begin(): void {
    inFlight++;
    lastBegin = Date.now();
  },
  end(): void {
    inFlight--;
  },
  /** a proxied WebSocket opened / closed */
  opened(): void {
    sockets++;
  },
  closed(): void {
    sockets--;
  },
  /** Resolves once nothing is in flight or open and no request came for QUIET_MS, or after `ms`. */
  async wait(ms: number, log: Logger): Promise<void> {
    draining = true;
    const started = Date.now();
    log.info({ event: 'gateway.draining', in_flight: inFlight, websockets: sockets, drain_ms: ms }, 'replaced: draining');
    while (Date.now() - started < ms) {
      if (inFlight <= 0 && sockets <= 0 && Date.now() - lastBegin >= QUIET_MS) break;
      await new Promise((r) => setTimeout(r, LOOK_EVERY_MS));
    }
    log.info({ event: 'gateway.drained', in_flight: inFlight, websockets: sockets, ms: Date.now() - started }, inFlight || sockets ? 'drain timeout: leaving what is still open' : 'drained');
  },
};
