// The gateway's connections to targets: plain TCP (TLS for https targets) sockets, kept alive and
// reused per target (last used first), bounded per target and in total, with a queue when a target's
// bound is reached. Reads of pooled connections land in one shared buffer (no allocation per read);
// whoever uses a connection consumes each read before returning. Timeouts are checked by one sweep
// timer over the connections in use, not by a timer per request.
import net from 'node:net';
import tls from 'node:tls';
import type { RouteEntry } from './table.js';

/** Whoever is using a connection: told what it reads and how it ends. */
export interface UpstreamUser {
  /** a connection to the target (called once, maybe later than acquire when the target's bound was reached) */
  attach(conn: Upstream): void;
  /** bytes from the target; for pooled connections a view of a shared buffer, valid until return */
  onData(buf: Buffer): void;
  /** the target ended its side of the connection */
  onEnd(): void;
  /** the connection failed (refused, reset, timed out) or the wait for one did */
  onFailure(err: NodeJS.ErrnoException): void;
}

export interface PoolOptions {
  connectTimeoutMs: number;
  /** longest silence from a connection in use */
  idleTimeoutMs: number;
  /** an idle pooled connection is closed after this long, before a target's own keep-alive timeout (node's: 5 s) */
  keepAliveMs?: number;
  maxPerTarget?: number;
  maxIdlePerTarget?: number;
  maxTotal?: number;
}

/** One read buffer for every pooled connection: each read is consumed synchronously by its user. */
const readBuffer = Buffer.allocUnsafe(64 * 1024);

const failure = (message: string, code: string): NodeJS.ErrnoException => Object.assign(new Error(message), { code });

interface Target {
  key: string;
  idle: Upstream[];
  /** connections open to this target, idle or not */
  open: number;
  waiting: Waiter[];
}

interface Waiter {
  entry: RouteEntry;
  user: UpstreamUser;
  since: number;
}

export class Upstream {
  user: UpstreamUser | null = null;
  /** responses completed on this connection: a reused one may have been closed by the target meanwhile */
  uses = 0;
  connecting = true;
  /** the pool's clock when this connection last moved bytes, or was connected or parked */
  lastIO: number;
  /** how long it may stay idle in the pool (the target may say less with `Keep-Alive: timeout=N`) */
  keepAliveMs: number;
  private gone = false;

  constructor(readonly socket: net.Socket, private readonly pool: UpstreamPool, readonly target: Target, readonly pooled: boolean) {
    this.lastIO = pool.now;
    this.keepAliveMs = pool.keepAliveMs;
  }

  get destroyed(): boolean {
    return this.gone || this.socket.destroyed;
  }

  /** Bytes towards the target; false when its buffer is full ('drain' on the socket follows). */
  write(data: string | Buffer): boolean {
    this.lastIO = this.pool.now;
    return this.socket.write(data);
  }

  data(buf: Buffer): void {
    this.lastIO = this.pool.now;
    if (this.user) this.user.onData(buf);
    else this.destroy(); // a parked connection has nothing to say: it is not reusable
  }

  ended(): void {
    const user = this.user;
    this.close();
    user?.onEnd();
  }

  failed(err: NodeJS.ErrnoException): void {
    const user = this.user;
    this.close();
    user?.onFailure(err);
  }

  /** Done with it: back to the pool when it can carry another request, closed otherwise. */
  release(reusable: boolean): void {
    this.user = null;
    if (reusable && !this.destroyed) {
      this.uses++;
      this.pool.park(this);
    } else this.destroy();
  }

  destroy(err?: NodeJS.ErrnoException): void {
    this.user = null;
    this.close();
    this.socket.destroy(err);
  }

  /** Bookkeeping once: the pool forgets the connection. */
  private close(): void {
    if (this.gone) return;
    this.gone = true;
    this.user = null;
    this.pool.closed(this);
  }
}

export class UpstreamPool {
  /** coarse clock (ms), advanced by the sweep: stamps cost no system call */
  now = Date.now();
  readonly keepAliveMs: number;
  private readonly targets = new Map<string, Target>();
  private readonly inUse = new Set<Upstream>();
  private readonly maxPerTarget: number;
  private readonly maxIdlePerTarget: number;
  private readonly maxTotal: number;
  private total = 0;
  private readonly timer: NodeJS.Timeout;
  private stopped = false;

  constructor(private readonly opts: PoolOptions) {
    this.keepAliveMs = opts.keepAliveMs ?? 4000;
    this.maxPerTarget = opts.maxPerTarget ?? 256;
    this.maxIdlePerTarget = opts.maxIdlePerTarget ?? 64;
    this.maxTotal = opts.maxTotal ?? 2048;
    const every = Math.min(1000, Math.max(25, Math.min(opts.connectTimeoutMs, opts.idleTimeoutMs, this.keepAliveMs) / 5));
    this.timer = setInterval(() => this.sweep(), every);
    this.timer.unref();
  }

  /** Connections open now: in use and idle (for the gateway's metrics). */
  get counts(): { active: number; idle: number } {
    return { active: this.inUse.size, idle: Math.max(0, this.total - this.inUse.size) };
  }

  /**
   * A connection for `user`, given through user.attach: an idle one (last used first) or a new one;
   * when the target's bound is reached, the user waits (at most the connect timeout). `fresh` skips
   * idle ones and `pooled: false` makes one that never returns to the pool (upgrades, retries).
   */
  acquire(entry: RouteEntry, user: UpstreamUser, { fresh = false, pooled = true } = {}): void {
    const target = this.target(entry);
    if (!fresh) {
      let conn: Upstream | undefined;
      while ((conn = target.idle.pop())) {
        if (conn.destroyed) continue;
        return this.hand(conn, user);
      }
    }
    if (target.open >= this.maxPerTarget || this.total >= this.maxTotal) {
      target.waiting.push({ entry, user, since: this.now });
      return;
    }
    this.hand(this.connect(entry, target, pooled), user);
  }

  /** A user that gave up before it got a connection. */
  cancel(entry: RouteEntry, user: UpstreamUser): void {
    const target = this.targets.get(entry.poolKey);
    if (!target) return;
    const i = target.waiting.findIndex((w) => w.user === user);
    if (i >= 0) target.waiting.splice(i, 1);
  }

  private hand(conn: Upstream, user: UpstreamUser): void {
    conn.user = user;
    conn.lastIO = this.now;
    this.inUse.add(conn);
    user.attach(conn);
  }

  private target(entry: RouteEntry): Target {
    let t = this.targets.get(entry.poolKey);
    if (!t) this.targets.set(entry.poolKey, (t = { key: entry.poolKey, idle: [], open: 0, waiting: [] }));
    return t;
  }

  private connect(entry: RouteEntry, target: Target, pooled: boolean): Upstream {
    const socket = openSocket(entry, (buf) => conn.data(buf));
    const conn = new Upstream(socket, this, target, pooled);
    target.open++;
    this.total++;
    socket.once(entry.protocol === 'https:' ? 'secureConnect' : 'connect', () => {
      conn.connecting = false;
      conn.lastIO = this.now;
    });
    socket.on('end', () => conn.ended());
    socket.on('error', (e: NodeJS.ErrnoException) => conn.failed(e));
    socket.on('close', () => conn.failed(failure('connection closed', 'ECONNRESET')));
    return conn;
  }

  /** A connection that can carry another request: the next waiting user gets it, or it is parked. */
  park(conn: Upstream): void {
    this.inUse.delete(conn);
    const target = conn.target;
    const waiter = target.waiting.shift();
    if (waiter) return this.hand(conn, waiter.user);
    if (this.stopped || target.idle.length >= this.maxIdlePerTarget) return conn.destroy();
    conn.lastIO = this.now;
    target.idle.push(conn);
  }

  /** The connection is gone: a waiting user may now open one. */
  closed(conn: Upstream): void {
    this.inUse.delete(conn);
    const target = conn.target;
    target.open--;
    this.total--;
    const i = target.idle.indexOf(conn);
    if (i >= 0) target.idle.splice(i, 1);
    const waiter = target.waiting.shift();
    if (waiter) queueMicrotask(() => this.acquire(waiter.entry, waiter.user));
  }

  /** Connections in use that are silent too long fail; idle ones past their keep-alive are closed; waits are bounded. */
  private sweep(): void {
    const now = (this.now = Date.now());
    for (const conn of this.inUse) {
      if (conn.connecting && now - conn.lastIO > this.opts.connectTimeoutMs) conn.failed(failure('connect timeout', 'HUB_CONNECT_TIMEOUT'));
      else if (now - conn.lastIO > this.opts.idleTimeoutMs) conn.failed(failure('idle timeout', 'HUB_IDLE_TIMEOUT'));
      else continue;
      conn.socket.destroy();
    }
    for (const target of this.targets.values()) {
      for (const conn of target.idle.slice()) if (now - conn.lastIO > conn.keepAliveMs) conn.destroy();
      while (target.waiting.length && now - target.waiting[0].since > this.opts.connectTimeoutMs) {
        target.waiting.shift()!.user.onFailure(failure('no connection to the target became free', 'HUB_CONNECT_TIMEOUT'));
      }
      if (!target.open && !target.waiting.length) this.targets.delete(target.key);
    }
  }

  /** Closes every connection; nothing is parked afterwards. */
  destroy(): void {
    this.stopped = true;
    clearInterval(this.timer);
    for (const target of this.targets.values()) for (const conn of target.idle.slice()) conn.destroy();
    for (const conn of [...this.inUse]) {
      conn.failed(failure('the gateway is stopping', 'ECONNRESET'));
      conn.socket.destroy();
    }
  }
}

/**
 * A new connection to a target, Nagle off, whose reads go to `onData`: for plain TCP a view of the shared
 * read buffer (valid until onData returns: keep nothing of it without copying); for TLS a buffer of its own.
 */
export function openSocket(entry: RouteEntry, onData: (buf: Buffer) => void): net.Socket {
  const options = { host: entry.hostname, port: entry.port, noDelay: true };
  if (entry.protocol === 'https:') {
    const socket = tls.connect({ ...options, servername: net.isIP(entry.hostname) ? undefined : entry.hostname, ALPNProtocols: ['http/1.1'] });
    socket.on('data', onData);
    return socket;
  }
  return net.connect({ ...options, onread: { buffer: readBuffer, callback: (n: number) => { onData(readBuffer.subarray(0, n)); return true; } } });
}
