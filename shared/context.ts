// What travels with a request through every hop: its id, who asked, and from which address. The gateway
// makes it (X-Request-Id if sane, else a new id) and hands it to each gRPC call (shared/grpc.ts puts it in
// the call's metadata); an actor serving a call runs the handler inside it (AsyncLocalStorage), so its log
// lines (shared/log.ts), audit events (shared/audit.ts) and its own nested calls carry it without being told.
// The gateway itself never enters the storage: async hooks would tax every promise on its hot path; it passes
// the context explicitly (`req.call`).
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';

export interface RequestContext {
  /** the request's id: the client's X-Request-Id when sane, else made by the gateway */
  readonly requestId: string;
  /** the person or service who asked (`user:<name>`, `service:<name>`, `anonymous`), once known */
  readonly who?: string;
  /** the client's address as the gateway saw it */
  readonly client?: string;
}

const storage = new AsyncLocalStorage<RequestContext>();

/** The request this code runs for, in an actor serving a gRPC call (undefined elsewhere). */
export function currentRequest(): RequestContext | undefined {
  return storage.getStore();
}

/** Runs `fn` on behalf of `context` (entered only by the gRPC server wrapper in actors). */
export function runForRequest<T>(context: RequestContext, fn: () => T): T {
  return storage.run(context, fn);
}

/** Runs `fn` outside any request (work that starts on its own, such as a process's exit). */
export function outsideRequest<T>(fn: () => T): T {
  return storage.exit(fn);
}

const SANE_ID = /^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$/;
const prefix = randomBytes(4).toString('hex');
let counter = 0;

/** The id of a new request: the client's own when it is a short plain token, else `<process>-<n>` (no allocation beyond the string). */
export function requestIdFor(incoming: string | undefined): string {
  if (incoming !== undefined && SANE_ID.test(incoming)) return incoming;
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `${prefix}-${counter.toString(36)}`;
}

/** Short and printable, for values that came from a client and go into metadata or logs. */
export function saneContextValue(v: string | undefined, max = 200): string | undefined {
  if (v === undefined || v === '') return undefined;
  const clean = v.replace(/[^\x20-\x7e]/g, '?');
  return clean.length > max ? clean.slice(0, max) : clean;
}
