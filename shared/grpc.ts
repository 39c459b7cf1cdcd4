// gRPC over unix sockets in the data dir: one server per actor, clients with a deadline on every call.
// Contracts live in proto/<actor>.proto (package hub.<actor>.v1); they are loaded at run time, no codegen.
import { existsSync, unlinkSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { asHubError, fromGrpcStatus, toGrpcStatus } from './errors.js';
import type { Logger } from './log.js';
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

export type UnaryHandler = (request: any) => Promise<unknown> | unknown;

/** Serves `handlers` (one per rpc of the actor's service) on a unix socket; HubErrors travel as gRPC statuses. */
export async function serveGrpc(actor: string, socketPath: string, handlers: Record<string, UnaryHandler>, log: Logger): Promise<grpc.Server> {
  const ctor = serviceConstructor(actor);
  const impl: grpc.UntypedServiceImplementation = {};
  for (const method of Object.keys(ctor.service)) {
    const handle = handlers[method];
    if (!handle) throw new Error(`${actor}: no handler for rpc ${method}`);
    impl[method] = (call: grpc.ServerUnaryCall<unknown, unknown>, done: grpc.sendUnaryData<unknown>) => {
      Promise.resolve()
        .then(() => handle(call.request))
        .then((reply) => done(null, reply as object), (e) => {
          const err = asHubError(e);
          if (err.status >= 500) log.error({ event: 'grpc.handler.failed', method, err: e }, 'rpc failed');
          done({ ...toGrpcStatus(err), name: 'HubError', message: err.message } as grpc.ServiceError);
        });
    };
  }
  const server = new grpc.Server();
  server.addService(ctor.service, impl);
  if (existsSync(socketPath)) unlinkSync(socketPath); // left behind by a killed predecessor
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  return server;
}

export interface GrpcClient {
  call<T>(method: string, request: object, timeoutMs?: number): Promise<T>;
  close(): void;
}

/** A client of another actor's gRPC service; every call has a deadline, failures come back as HubErrors. */
export function createGrpcClient(actor: string, socketPath: string, defaultTimeoutMs: number): GrpcClient {
  const ctor = serviceConstructor(actor);
  const client = new ctor(`unix://${socketPath}`, grpc.credentials.createInsecure(), {
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 1000,
  }) as grpc.Client & Record<string, Function>;
  return {
    call<T>(method: string, request: object, timeoutMs = defaultTimeoutMs): Promise<T> {
      const fn = client[method];
      if (typeof fn !== 'function') return Promise.reject(new Error(`${actor} has no rpc ${method}`));
      return new Promise<T>((resolve, reject) => {
        fn.call(client, request, { deadline: Date.now() + timeoutMs }, (e: grpc.ServiceError | null, reply: T) =>
          e ? reject(fromGrpcStatus(e, actor)) : resolve(reply));
      });
    },
    close: () => client.close(),
  };
}

export async function stopGrpc(server: grpc.Server, budgetMs: number): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => { server.forceShutdown(); resolve(); }, budgetMs);
    server.tryShutdown(() => { clearTimeout(timer); resolve(); });
  });
}
