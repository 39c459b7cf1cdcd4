// gRPC over unix sockets in the data dir: one server per actor, clients with a deadline on every call.
// Contracts live in proto/<actor>.proto (package hub.<actor>.v1): loaded at run time here, and typed by the
// TypeScript generated from the same files (shared/contracts/).
import { existsSync, unlinkSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { currentRequest, runForRequest, type RequestContext } from './context.js';
import type { CallContext, CallOptions, Client, Handlers, ServiceActor } from './contracts/index.js';
import { asHubError, errors, fromGrpcStatus, toGrpcStatus } from './errors.js';
import type { Logger } from './log.js';
import { grpcClientDuration, grpcServerDuration, outcomeOf, secondsSince, type HistogramChild } from './metrics.js';
import { PROTO_DIR } from './paths.js';

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
/** Metadata keys of the request context (shared/context.ts), next to the deadline. */
const REQUEST_ID_KEY = 'hub-request-id';
const WHO_KEY = 'hub-who';
const CLIENT_KEY = 'hub-client';

/** Serves `handlers` (one per rpc of the actor's service) on a unix socket; HubErrors travel as gRPC statuses. */
export async function serveGrpc<A extends ServiceActor>(actor: A, socketPath: string, handlers: Handlers<A>, log: Logger): Promise<grpc.Server> {
  const ctor = serviceConstructor(actor);
  const impl: grpc.UntypedServiceImplementation = {};
  const table = handlers as unknown as Record<string, (request: unknown, call: CallContext) => unknown>;
  for (const method of Object.keys(ctor.service)) {
    const handle = table[method];
    if (!handle) throw new Error(`${actor}: no handler for rpc ${method}`);
    const okTimer = grpcServerDuration.child(method, 'ok');
    impl[method] = (call: grpc.ServerUnaryCall<unknown, unknown>, done: grpc.sendUnaryData<unknown>) => {
      const start = performance.now();
      const fail = (e: unknown) => {
        const err = asHubError(e);
        if (err.status >= 500 && err.status !== 504) log.error({ event: 'grpc.handler.failed', method, err: e }, 'rpc failed');
        grpcServerDuration.observe([method, outcomeOf(err)], secondsSince(start));
        done({ ...toGrpcStatus(err), name: 'HubError', message: err.message } as grpc.ServiceError);
      };
      const context = callContext(call);
      // The caller gave up while the request waited: do nothing it could no longer learn about.
      if (context.cancelled) return fail(errors.timeout(`${actor}.${method}`));
      const run = () => Promise.resolve()
        .then(() => handle(call.request, context))
        .then((reply) => { okTimer.observe(secondsSince(start)); done(null, reply as object); }, fail);
      // Only calls made for a request enter its context (Pings and the like stay out of async hooks' way).
      if (context.request) runForRequest(context.request, run);
      else void run();
    };
  }
  const server = new grpc.Server();
  server.addService(ctor.service, impl);
  if (existsSync(socketPath)) unlinkSync(socketPath); // left behind by a killed predecessor
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  return server;
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
 * A typed client of another actor's service (`auth.getUser({name})`): every call has a deadline (the
 * caller's, passed on, or now + `defaultTimeoutMs`), carried to the callee; failures reject as HubErrors.
 */
export function createGrpcClient<A extends ServiceActor>(actor: A, socketPath: string, defaultTimeoutMs: number): Client<A> {
  const ctor = serviceConstructor(actor);
  const client = new ctor(`unix://${socketPath}`, grpc.credentials.createInsecure(), {
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 1000,
  }) as grpc.Client & Record<string, Function>;
  const typed: Record<string, unknown> = { close: () => client.close() };
  for (const method of Object.keys(ctor.service)) {
    const fn = client[method];
    const okTimer: HistogramChild = grpcClientDuration.child(actor, method, 'ok');
    typed[lowerFirst(method)] = (request: object, options: CallOptions = {}) => {
      const deadline = options.deadline ?? Date.now() + defaultTimeoutMs;
      if (Date.now() >= deadline) return Promise.reject(errors.timeout(`${actor}.${method}`));
      const metadata = new grpc.Metadata();
      metadata.set(DEADLINE_KEY, String(deadline));
      // the request this call serves: said by the gateway, implicit inside an actor's handler
      const context = options.request ?? currentRequest();
      if (context) {
        // gRPC metadata values are printable ASCII: names (`user:émile`) travel percent-encoded
        metadata.set(REQUEST_ID_KEY, encodeURIComponent(context.requestId));
        if (context.who) metadata.set(WHO_KEY, encodeURIComponent(context.who));
        if (context.client) metadata.set(CLIENT_KEY, encodeURIComponent(context.client));
      }
      const start = performance.now();
      return new Promise((resolve, reject) => {
        fn.call(client, request, metadata, { deadline }, (e: grpc.ServiceError | null, reply: unknown) => {
          if (e) {
            const err = fromGrpcStatus(e, actor);
            grpcClientDuration.observe([actor, method, outcomeOf(err)], secondsSince(start));
            reject(err);
          } else {
            okTimer.observe(secondsSince(start));
            resolve(reply);
          }
        });
      });
    };
  }
  return typed as Client<A>;
}

export async function stopGrpc(server: grpc.Server, budgetMs: number): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => { server.forceShutdown(); resolve(); }, budgetMs);
    server.tryShutdown(() => { clearTimeout(timer); resolve(); });
  });
}

/** Call options for a call allowed `ms` from now (for calls that legitimately take longer than one rpc_timeout). */
export const within = (ms: number, base: CallOptions = {}): CallOptions => ({ ...base, deadline: Date.now() + ms });
