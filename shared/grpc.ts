// gRPC over unix sockets in the data dir: one server per actor, clients with a deadline on every call.
// Contracts live in proto/<actor>.proto (package hub.<actor>.v1): loaded at run time here, and typed by the
// TypeScript generated from the same files (shared/contracts/).
import { renameSync, rmSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { currentRequest, runForRequest, type RequestContext } from './context.js';
import type { CallContext, CallOptions, Client, Handlers, ServiceActor } from './contracts/index.js';
import { asHubError, errors, fromGrpcStatus, fromNatsReply, fromNatsRequestError, toGrpcStatus, toNatsHeaders, type HubError } from './errors.js';
import type { Logger } from './log.js';
import { grpcClientDuration, grpcServerDuration, outcomeOf, secondsSince, type HistogramChild } from './metrics.js';
import { headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from 'nats';
import type { HubConfig } from './config.js';
import type { CallFrame, CallFrame__Output } from './contracts/generated/hub/common/v1/CallFrame.js';
import type { ReplyFrame, ReplyFrame__Output } from './contracts/generated/hub/common/v1/ReplyFrame.js';
import { grpcSocketPath, PROTO_DIR } from './paths.js';
import { subjects } from './subjects.js';

/** 'proxy-router' → file proxy_router.proto, package hub.proxy_router.v1, service ProxyRouter. */
function protoNames(actor: string): { file: string; pkg: string; service: string } {
  const snake = actor.replace(/-/g, '_');
  const service = actor === 'oauth' ? 'OAuth' : actor.split('-').map((w) => w[0].toUpperCase() + w.slice(1)).join('');
  return { file: `${snake}.proto`, pkg: `hub.${snake}.v1`, service };
}

const definitions = new Map<string, grpc.ServiceClientConstructor>();

function serviceConstructor(actor: string): grpc.ServiceClientConstructor {
  let ctor = definitions.get(actor);
  if (!ctor) {
    const { file, pkg, service } = protoNames(actor);
    const def = protoLoader.loadSync(file, { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
    let node: unknown = grpc.loadPackageDefinition(def);
    for (const part of [...pkg.split('.'), service]) node = (node as Record<string, unknown>)[part];
    ctor = node as grpc.ServiceClientConstructor;
    definitions.set(actor, ctor);
  }
  return ctor;
}

/** Metadata key carrying the caller's absolute deadline: gRPC's own is relative and restarts its clock at the
 * receiver, so a request that waited in a stopped or busy process would look fresh (epoch ms, same-host clocks). */
const DEADLINE_KEY = 'hub-deadline-ms';
/**
 * grpc-js keeps channelz (its introspection service's counters and traces) for every channel, subchannel, server and
 * call unless told not to; nothing here serves channelz, so each call would pay for bookkeeping no one reads.
 */
const NO_CHANNELZ = { 'grpc.enable_channelz': 0 } as const;
/** A client's channel: reconnects soon after its callee restarts. */
const CLIENT_CHANNEL = { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 1000, ...NO_CHANNELZ } as const;
/** Metadata keys of the request context (shared/context.ts), next to the deadline. */
const REQUEST_ID_KEY = 'hub-request-id';
const WHO_KEY = 'hub-who';
const CLIENT_KEY = 'hub-client';

/** Serves `handlers` (one per rpc of the actor's service) on a unix socket; HubErrors travel as gRPC statuses. */
export async function serveGrpc<A extends ServiceActor>(actor: A, socketPath: string, handlers: Handlers<A>, log: Logger): Promise<grpc.Server> {
  const ctor = serviceConstructor(actor);
  const impl: grpc.UntypedServiceImplementation = {};
  const table = handlers as unknown as Record<string, (request: unknown, call: CallContext) => unknown>;
  const served = new Map<string, ServedRpc>();
  for (const method of Object.keys(ctor.service)) {
    const handle = table[method];
    if (!handle) throw new Error(`${actor}: no handler for rpc ${method}`);
    const invoke = handlerInvoker(actor, method, handle, log);
    served.set(method, { def: ctor.service[method], invoke });
    impl[method] = (call: grpc.ServerUnaryCall<unknown, unknown>, done: grpc.sendUnaryData<unknown>) => {
      invoke(call.request, callContext(call)).then((reply) => done(null, reply as object), (err: HubError) => {
        done({ ...toGrpcStatus(err), name: 'HubError', message: err.message } as grpc.ServiceError);
      });
    };
  }
  const server = new grpc.Server({ ...NO_CHANNELZ, 'grpc.max_receive_message_length': MAX_MESSAGE + FRAME_ROOM });
  server.addService(ctor.service, impl);
  const streams: ServedStreams = { open: new Set(), stopping: false };
  openStreams.set(server, streams);
  server.addService(callsService().service, {
    Calls: (call: grpc.ServerDuplexStream<CallFrame__Output, ReplyFrame>) => serveCallStream(actor, call, served, streams),
  });
  // Bound under a name of this process's own, then renamed over the actor's path in one step: callers that connect
  // from now on reach this server, while a predecessor still running (`hub restart`) keeps its open connections
  // until it closes them. Closing a unix socket server unlinks the name it was bound to: this one's, gone by then,
  // never the path a successor holds.
  const bound = `${socketPath}.${process.pid}`;
  rmSync(bound, { force: true });
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${bound}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  renameSync(bound, socketPath);
  return server;
}

/** Handler invocations under way in this process (both transports), so a replaced actor finishes them before it exits. */
let callsInFlight = 0;
const idleWaiters: (() => void)[] = [];

/** Resolves once no handler runs (at once when none does), or after `ms`; true when idle. */
export function callsDone(ms: number): Promise<boolean> {
  if (callsInFlight === 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    idleWaiters.push(() => { clearTimeout(timer); resolve(true); });
  });
}

function callEnded(): void {
  if (--callsInFlight > 0) return;
  for (const wake of idleWaiters.splice(0)) wake();
}

/** One handler as both transports run it: refused when the caller gave up, timed, inside the request's context. */
function handlerInvoker(actor: string, method: string, handle: (request: unknown, call: CallContext) => unknown, log: Logger) {
  const okTimer = grpcServerDuration.child(method, 'ok');
  return (request: unknown, context: CallContext): Promise<unknown> => {
    const start = performance.now();
    const fail = (e: unknown): never => {
      const err = asHubError(e);
      if (err.status >= 500 && err.status !== 504) log.error({ event: 'grpc.handler.failed', method, err: e }, 'rpc failed');
      grpcServerDuration.observe([method, outcomeOf(err)], secondsSince(start));
      throw err;
    };
    // The caller gave up while the request waited: do nothing it could no longer learn about.
    if (context.cancelled) return Promise.reject(errors.timeout(`${actor}.${method}`)).catch(fail);
    const run = () => Promise.resolve()
      .then(() => handle(request, context))
      .then((reply) => { okTimer.observe(secondsSince(start)); return reply; }, fail);
    callsInFlight++;
    // Only calls made for a request enter its context (Pings and the like stay out of async hooks' way).
    const running = context.request ? runForRequest(context.request, run) : run();
    running.then(callEnded, callEnded);
    return running;
  };
}

function callContext(call: grpc.ServerUnaryCall<unknown, unknown>): CallContext {
  const sent = Number(call.metadata.get(DEADLINE_KEY)[0]);
  const own = call.getDeadline();
  const relative = own instanceof Date ? own.getTime() : Number.isFinite(own) ? Number(own) : Infinity;
  const deadline = Math.min(Number.isFinite(sent) && sent > 0 ? sent : Infinity, relative);
  const requestId = metadataString(call.metadata, REQUEST_ID_KEY);
  const request: RequestContext | undefined = requestId
    ? { requestId, who: metadataString(call.metadata, WHO_KEY), client: metadataString(call.metadata, CLIENT_KEY) }
    : undefined;
  return {
    deadline,
    request,
    get cancelled() {
      return call.cancelled || Date.now() >= deadline;
    },
  };
}

function metadataString(metadata: grpc.Metadata, key: string): string | undefined {
  const v = metadata.get(key)[0];
  if (typeof v !== 'string' || !v) return undefined;
  try {
    return decodeURIComponent(v);
  } catch {
    return undefined; // not ours: ignored rather than trusted
  }
}

const lowerFirst = (s: string) => s[0].toLowerCase() + s.slice(1);

/**
 * What travels with every call, over gRPC metadata or NATS headers alike: the caller's deadline, and the request
 * it serves (said by the gateway, implicit inside an actor's handler). Values are printable ASCII: names
 * (`user:émile`) travel percent-encoded.
 */
function carryCall(into: { set(key: string, value: string): void }, deadline: number, options: CallOptions): void {
  into.set(DEADLINE_KEY, String(deadline));
  const context = options.request ?? currentRequest();
  if (!context) return;
  into.set(REQUEST_ID_KEY, encodeURIComponent(context.requestId));
  if (context.who) into.set(WHO_KEY, encodeURIComponent(context.who));
  if (context.client) into.set(CLIENT_KEY, encodeURIComponent(context.client));
}

/**
 * gRPC's answer when nothing listens on the callee's socket (the request was never sent), or, for a repeatable call,
 * any failure of the transport itself (a connection that dropped, was reset: the callee had just died, perhaps with
 * the request); never the callee's own 503, which travels as one of our errors (JSON details).
 */
const grpcNotReached = (repeatable: boolean) => (e: unknown) => {
  const { code, details = '' } = (e ?? {}) as grpc.ServiceError;
  return code === grpc.status.UNAVAILABLE && (repeatable ? !details.startsWith('{') : details.startsWith('No connection established'));
};
/** NATS's "no responders": nobody received the request. */
const natsNotReached = (e: unknown) => (e as { code?: string })?.code === '503';

/**
 * `attempt`, tried again while it fails without reaching the callee, for up to `waitMs` (and never past the deadline):
 * a call sent while its callee restarts (`hub restart`, a crash) waits for the new one instead of failing at once.
 * Bounded in time; the pauses grow from 25 ms to 250 ms.
 */
async function untilReached<T>(attempt: () => Promise<T>, notReached: (e: unknown) => boolean, waitMs: number, deadline: number): Promise<T> {
  const until = Math.min(deadline - 50, Date.now() + waitMs);
  for (let pause = 25; ; pause = Math.min(pause * 2, 250)) {
    try {
      return await attempt();
    } catch (e) {
      if (!notReached(e) || Date.now() + pause >= until) throw e;
    }
    await new Promise((r) => setTimeout(r, pause));
  }
}

/**
 * A typed client of another actor's service (`auth.getUser({name})`): every call has a deadline (the
 * caller's, passed on, or now + `defaultTimeoutMs`), carried to the callee; failures reject as HubErrors.
 */
export function createGrpcClient<A extends ServiceActor>(actor: A, socketPath: string, defaultTimeoutMs: number, defaultWaitMs = 0): Client<A> {
  const ctor = serviceConstructor(actor);
  const client = new ctor(`unix://${socketPath}`, grpc.credentials.createInsecure(), CLIENT_CHANNEL) as grpc.Client & Record<string, Function>;
  const line = new CallLine(new (callsService())(`unix://${socketPath}`, grpc.credentials.createInsecure(), {
    ...CLIENT_CHANNEL,
    'grpc.max_receive_message_length': MAX_MESSAGE + FRAME_ROOM,
  }) as unknown as CallsClient);
  const typed: Record<string, unknown> = { close: () => { line.close(); client.close(); } };
  for (const method of Object.keys(ctor.service)) {
    const fn = client[method];
    const def = ctor.service[method];
    const okTimer: HistogramChild = grpcClientDuration.child(actor, method, 'ok');
    typed[lowerFirst(method)] = (request: object, options: CallOptions = {}) => {
      const deadline = options.deadline ?? Date.now() + defaultTimeoutMs;
      if (Date.now() >= deadline) return Promise.reject(errors.timeout(`${actor}.${method}`));
      const context = options.request ?? currentRequest();
      const start = performance.now();
      // unary only when the callee has no Calls service (a version before it, during a rolling restart)
      const unary = () => new Promise((resolve, reject) => {
        const metadata = new grpc.Metadata();
        carryCall(metadata, deadline, { ...options, request: context });
        fn.call(client, request, metadata, { deadline }, (e: grpc.ServiceError | null, reply: unknown) => (e ? reject(e) : resolve(reply)));
      });
      const once = () => {
        if (line.unaryOnly) return unary();
        const bytes = def.requestSerialize(request);
        if (bytes.length > MAX_MESSAGE) return Promise.reject({ code: grpc.status.RESOURCE_EXHAUSTED, details: `${actor}.${method}: request of ${bytes.length} bytes, over ${MAX_MESSAGE}` });
        // a callee without the stream took nothing: the call goes unary at once
        return line.send(method, bytes, deadline, context).then((reply) => def.responseDeserialize(reply), (e) => {
          if (line.unaryOnly) return unary();
          throw e;
        });
      };
      return untilReached(once, grpcNotReached(options.repeatable === true), options.waitForCalleeMs ?? defaultWaitMs, deadline).then((reply) => {
        okTimer.observe(secondsSince(start));
        return reply;
      }, (e: grpc.ServiceError) => {
        const err = fromGrpcStatus(e, actor);
        grpcClientDuration.observe([actor, method, outcomeOf(err)], secondsSince(start));
        throw err;
      });
    };
  }
  return typed as Client<A>;
}

// ---- calls as messages on one stream --------------------------------------------------------------------
// A grpc-js unary call costs about four times what one message on an open stream does (`npm run bench transport`:
// 0.57 against 0.14 ms back to back, 2.2 against 0.74 ms after 5 ms of idleness), and a login, a page or a write is
// one or more calls between actors. So a client keeps one bidirectional stream (`hub.common.v1.Calls`) to its callee
// and sends each call as a CallFrame: the rpc's name and request bytes, the deadline and the request context (what
// a unary call carries as metadata); the callee answers with a ReplyFrame of the same id. Handlers, deadlines,
// errors and metrics are the unary path's (handlerInvoker, fromGrpcStatus); the unary rpcs stay served.
// A callee that stops sends id 0 (going away) and answers any frame it did not take with `not_served`; the client
// sends new calls on a new stream (which reaches whoever holds the socket path by then), sends the refused ones
// again as calls that never reached their callee, and half-closes the old stream, which the callee ends once every
// call it took is answered. A stream that breaks with calls under way fails them as a dropped unary call fails.

/** gRPC's default largest message; a frame has room for a message of that size and its envelope. */
const MAX_MESSAGE = 4 * 1024 * 1024;
const FRAME_ROOM = 64 * 1024;

let callsCtor: grpc.ServiceClientConstructor | undefined;
function callsService(): grpc.ServiceClientConstructor {
  if (!callsCtor) {
    const def = protoLoader.loadSync('common.proto', { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
    callsCtor = (grpc.loadPackageDefinition(def) as unknown as { hub: { common: { v1: { Calls: grpc.ServiceClientConstructor } } } }).hub.common.v1.Calls;
  }
  return callsCtor;
}

interface ServedRpc { def: grpc.MethodDefinition<unknown, unknown>; invoke: (request: unknown, context: CallContext) => Promise<unknown> }
interface ServedStream { goAway(): void }
/** Each server's open call streams, told to go away when it stops (and any opened after, at once). */
interface ServedStreams { open: Set<ServedStream>; stopping: boolean }
const openStreams = new WeakMap<grpc.Server, ServedStreams>();

function serveCallStream(actor: string, call: grpc.ServerDuplexStream<CallFrame__Output, ReplyFrame>, served: Map<string, ServedRpc>, streams: ServedStreams): void {
  const open = streams.open;
  let underWay = 0;
  /** the callee stops: frames from now on are not taken */
  let goingAway = false;
  /** the client sends no more frames */
  let clientDone = false;
  let ended = false;
  const write = (frame: ReplyFrame) => {
    if (!ended && !call.cancelled) call.write(frame);
  };
  const endWhenAnswered = () => {
    if (ended || underWay > 0 || !clientDone) return;
    ended = true;
    open.delete(stream);
    call.end();
  };
  const stream: ServedStream = {
    goAway() {
      if (goingAway) return;
      goingAway = true;
      write({ id: 0 });
    },
  };
  open.add(stream);
  call.sendMetadata(new grpc.Metadata()); // the client's sign that its frames reach a callee from now on
  if (streams.stopping) stream.goAway();
  call.on('data', (f: CallFrame__Output) => {
    if (goingAway) return write({ id: f.id, not_served: true });
    const rpc = served.get(f.method);
    if (!rpc) return write({ id: f.id, error: JSON.stringify(errors.internal(new Error(`${actor} has no rpc ${f.method}`)).toJSON()) });
    const deadline = f.deadline_ms > 0 ? f.deadline_ms : Date.now() + 5000;
    const context: CallContext = {
      deadline,
      request: f.request_id ? { requestId: f.request_id, who: f.who || undefined, client: f.client || undefined } : undefined,
      get cancelled() {
        return call.cancelled || Date.now() >= deadline;
      },
    };
    let request: unknown;
    try {
      request = rpc.def.requestDeserialize(f.request);
    } catch (e) {
      return write({ id: f.id, error: JSON.stringify(errors.badRequest(`${actor}: unreadable request (${(e as Error).message})`).toJSON()) });
    }
    underWay++;
    rpc.invoke(request, context).then((reply) => {
      const bytes = rpc.def.responseSerialize(reply);
      // what a unary client would refuse to receive: refused alone, not with the whole stream
      write(bytes.length > MAX_MESSAGE
        ? { id: f.id, error: JSON.stringify(errors.internal(new Error(`${actor}.${f.method}: reply of ${bytes.length} bytes, over ${MAX_MESSAGE}`)).toJSON()) }
        : { id: f.id, reply: bytes });
    }, (err: HubError) => write({ id: f.id, error: JSON.stringify(err.toJSON()) })).finally(() => {
      underWay--;
      endWhenAnswered();
    });
  });
  call.on('end', () => {
    clientDone = true;
    endWhenAnswered();
  });
  call.on('cancelled', () => {
    ended = true;
    open.delete(stream);
  });
  call.on('error', () => undefined); // the client vanished: 'cancelled' follows
}

type CallsClient = grpc.Client & { Calls(): grpc.ClientDuplexStream<CallFrame, ReplyFrame__Output> };
/** What a call that never reached its callee fails with: grpcNotReached sends it again. */
const NOT_TAKEN = { code: grpc.status.UNAVAILABLE, details: 'No connection established (the callee did not take the call)' };
/** A callee's answer that it is going away and did not take the call. */
const NOT_SERVED = { code: grpc.status.UNAVAILABLE, details: 'No connection established (the callee is going away)' };

interface Waiting { resolve(reply: Buffer): void; reject(e: { code: number; details: string }): void; timer: NodeJS.Timeout }

/** One stream of calls: written to once the callee's metadata came (before that a frame may reach nobody). */
class CallStream {
  readonly waiting = new Map<number, Waiting>();
  readonly queued: CallFrame[] = [];
  ready = false;
  constructor(readonly stream: grpc.ClientDuplexStream<CallFrame, ReplyFrame__Output>) {}
}

/** A client's calls to one callee: one open stream at a time, opened at the first call and after the callee went away. */
class CallLine {
  private current: CallStream | null = null;
  private lastId = 0;
  /** the callee has no Calls service: unary calls from now on */
  unaryOnly = false;
  private closed = false;

  constructor(private readonly client: CallsClient) {}

  /**
   * One call; sent again (on the next stream) while the callee answers that it did not take it: it is handing over
   * to a successor, so the call is never done twice and waits at most until its deadline (pauses of 5 to 100 ms).
   */
  async send(method: string, request: Buffer, deadline: number, context: RequestContext | undefined): Promise<Buffer> {
    for (let pause = 5; ; pause = Math.min(pause * 2, 100)) {
      try {
        return await this.sendOnce(method, request, deadline, context);
      } catch (e) {
        if (e !== NOT_SERVED) throw e;
        if (Date.now() + pause >= deadline) throw NOT_TAKEN;
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  private sendOnce(method: string, request: Buffer, deadline: number, context: RequestContext | undefined): Promise<Buffer> {
    if (this.closed) return Promise.reject({ code: grpc.status.CANCELLED, details: 'the client was closed' });
    const line = this.current ?? this.open();
    this.lastId = this.lastId >= 0xfffffffe ? 1 : this.lastId + 1;
    const id = this.lastId;
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        line.waiting.delete(id);
        reject({ code: grpc.status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
      }, Math.max(0, deadline - Date.now()));
      line.waiting.set(id, { resolve, reject, timer });
      const frame: CallFrame = { id, method, deadline_ms: deadline, request_id: context?.requestId ?? '', who: context?.who ?? '', client: context?.client ?? '', request };
      if (line.ready) line.stream.write(frame);
      else line.queued.push(frame);
    });
  }

  close(): void {
    this.closed = true;
    this.current?.stream.end();
    this.current = null;
    this.client.close();
  }

  private open(): CallStream {
    const line = new CallStream(this.client.Calls());
    this.current = line;
    line.stream.on('metadata', () => {
      line.ready = true;
      for (const frame of line.queued.splice(0)) line.stream.write(frame);
    });
    line.stream.on('data', (f: ReplyFrame__Output) => {
      if (f.id === 0) return this.retire(line);
      const w = line.waiting.get(f.id);
      if (!w) return; // its deadline passed
      line.waiting.delete(f.id);
      clearTimeout(w.timer);
      if (f.not_served) w.reject(NOT_SERVED);
      else if (f.error) w.reject({ code: grpc.status.UNKNOWN, details: f.error }); // fromGrpcStatus reads the JSON
      else w.resolve(f.reply);
    });
    const broken = (e?: grpc.ServiceError) => {
      if (this.current === line) this.current = null;
      // no Calls service there: nothing was taken, and unary calls will be
      if (e?.code === grpc.status.UNIMPLEMENTED) this.unaryOnly = true;
      const taken = line.ready && e?.code !== grpc.status.UNIMPLEMENTED;
      const failure = taken ? { code: grpc.status.UNAVAILABLE, details: `the call stream broke: ${e?.details || 'ended'}` } : NOT_TAKEN;
      for (const w of line.waiting.values()) {
        clearTimeout(w.timer);
        w.reject(failure);
      }
      line.waiting.clear();
      line.queued.length = 0;
    };
    line.stream.on('error', broken);
    line.stream.on('end', () => broken());
    return line;
  }

  /** The callee goes away: calls from now on take a new stream; this one ends once its calls are answered. */
  private retire(line: CallStream): void {
    if (this.current === line) this.current = null;
    line.stream.end();
  }
}

/**
 * Stops taking calls: the listen socket closes and every open connection is told to go away (HTTP/2 GOAWAY, so its
 * client connects again, to whoever holds the socket path now); calls under way finish. Forced after `budgetMs`.
 */
export async function stopGrpc(server: grpc.Server, budgetMs: number): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => { server.forceShutdown(); resolve(); }, budgetMs);
    server.tryShutdown(() => { clearTimeout(timer); resolve(); });
    // after the connections' GOAWAY, so a client's next stream opens on a new connection (to the path's new holder)
    const streams = openStreams.get(server);
    if (!streams) return;
    streams.stopping = true;
    for (const stream of streams.open) stream.goAway();
  });
}

/** Call options for a call allowed `ms` from now (for calls that legitimately take longer than one rpc_timeout). */
export const within = (ms: number, base: CallOptions = {}): CallOptions => ({ ...base, deadline: Date.now() + ms });
/** The share of a call's budget it may spend waiting for a callee that restarts (the rest is for the call itself). */
const restartWaitShare = 0.8;
/** How long a call that must not fail for a restart (a server's start) waits for its callee: most of Hub.rpc_timeout. */
export const restartWaitMs = (config: HubConfig): number => config.Hub.rpc_timeout * 1000 * restartWaitShare;

// ---- between nodes: the same contracts over NATS ------------------------------------------------------
// An actor another node needs (the gateway of a node that runs only spawner and gateway asks auth and tokens)
// is reached over NATS, which every node shares: the request is the rpc's protobuf bytes on
// `hub.<actor>.rpc.<method>` in the actor's queue group (any instance answers), the deadline and the request
// context ride in headers as they ride in gRPC metadata, and errors come back as the NATS error headers.

/**
 * Serves an actor's handler table over NATS too; returns the subscription (drained with the connection).
 * `node`: on this node's own subjects instead (subjects.nodeRpc), for calls meant for this node's instance only.
 */
export function serveGrpcOverNats<A extends ServiceActor>(nc: NatsConnection, actor: A, handlers: Handlers<A>, log: Logger, node?: string): Subscription {
  const ctor = serviceConstructor(actor);
  const table = handlers as unknown as Record<string, (request: unknown, call: CallContext) => unknown>;
  const methods = new Map(Object.keys(ctor.service).map((method) => {
    const def = ctor.service[method];
    return [method.toLowerCase(), { def, invoke: handlerInvoker(actor, method, table[method], log) }] as const;
  }));
  const prefix = node === undefined ? subjects.rpc(actor, '') : subjects.nodeRpc(actor, node, '');
  return nc.subscribe(`${prefix}*`, {
    queue: node === undefined ? `hub-${actor}` : `hub-${actor}-node`,
    callback: (_e, m) => {
      const entry = methods.get(m.subject.slice(prefix.length));
      if (!entry || !m.reply) return;
      const header = (k: string) => {
        const v = m.headers?.get(k);
        try {
          return v ? decodeURIComponent(v) : undefined;
        } catch {
          return undefined;
        }
      };
      const sent = Number(header(DEADLINE_KEY));
      const deadline = Number.isFinite(sent) && sent > 0 ? sent : Date.now() + 5000;
      const requestId = header(REQUEST_ID_KEY);
      const context: CallContext = {
        deadline,
        request: requestId ? { requestId, who: header(WHO_KEY), client: header(CLIENT_KEY) } : undefined,
        get cancelled() {
          return Date.now() >= deadline;
        },
      };
      let request: unknown;
      try {
        request = entry.def.requestDeserialize(Buffer.from(m.data));
      } catch (e) {
        return void replyError(m, errors.badRequest(`${actor}: unreadable request (${(e as Error).message})`));
      }
      entry.invoke(request, context).then(
        (reply) => m.respond(entry.def.responseSerialize(reply)),
        (err: HubError) => replyError(m, err),
      );
    },
  });
}

function replyError(m: Msg, err: HubError): void {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(toNatsHeaders(err))) h.set(k, v);
  m.respond(new Uint8Array(), { headers: h });
}

/**
 * A typed client of an actor on another node, over NATS: the same calls, deadlines and errors as `createGrpcClient`.
 * `node`: the instance of that node only (served with `serveGrpcOverNats(..., node)`).
 */
export function createNatsRpcClient<A extends ServiceActor>(actor: A, nc: NatsConnection, defaultTimeoutMs: number, node?: string, defaultWaitMs = 0): Client<A> {
  const ctor = serviceConstructor(actor);
  const typed: Record<string, unknown> = { close: () => undefined };
  for (const method of Object.keys(ctor.service)) {
    const def = ctor.service[method];
    const subject = node === undefined ? subjects.rpc(actor, method) : subjects.nodeRpc(actor, node, method);
    const okTimer: HistogramChild = grpcClientDuration.child(actor, method, 'ok');
    typed[lowerFirst(method)] = async (request: object, options: CallOptions = {}) => {
      const deadline = options.deadline ?? Date.now() + defaultTimeoutMs;
      if (Date.now() >= deadline) throw errors.timeout(`${actor}.${method}`);
      const h = natsHeaders();
      carryCall(h, deadline, options);
      const start = performance.now();
      let err: HubError | null;
      let reply: Msg | undefined;
      try {
        reply = await untilReached(() => nc.request(subject, def.requestSerialize(request), { timeout: Math.max(1, deadline - Date.now()), headers: h }),
          natsNotReached, options.waitForCalleeMs ?? defaultWaitMs, deadline);
        err = fromNatsReply(reply.headers);
      } catch (e) {
        err = fromNatsRequestError(e, `${actor}.${method}`);
      }
      if (err) {
        grpcClientDuration.observe([actor, method, outcomeOf(err)], secondsSince(start));
        throw err;
      }
      okTimer.observe(secondsSince(start));
      return def.responseDeserialize(Buffer.from(reply!.data));
    };
  }
  return typed as Client<A>;
}

/**
 * The client an actor uses to call another: over its unix socket when this node runs that actor (the fast,
 * usual way), else over NATS to whichever node runs it (`Supervisor.actors` says which run here).
 */
export function createActorClient<A extends ServiceActor>(actor: A, { config, nc, timeoutMs, waitForCalleeMs = restartWaitShare * timeoutMs }: {
  config: HubConfig; nc: NatsConnection; timeoutMs: number;
  /** how long a call waits for a callee that cannot be reached (restarting); default most of `timeoutMs` */
  waitForCalleeMs?: number;
}): Client<A> {
  return (config.Supervisor.actors as readonly string[]).includes(actor)
    ? createGrpcClient(actor, grpcSocketPath(config.Hub.data_dir, actor), timeoutMs, waitForCalleeMs)
    : createNatsRpcClient(actor, nc, timeoutMs, undefined, waitForCalleeMs);
}
