// The actors' gRPC contracts as TypeScript: the types are generated from proto/ at build time
// (scripts/setup.mjs runs @grpc/proto-loader's generator into ./generated); this file only turns each
// service definition into the promise client callers use and the handler table an actor implements.
// Renaming a field or an rpc in a .proto breaks the build here and at every caller, not in production.
import type { MethodDefinition } from '@grpc/proto-loader';
import type { RequestContext } from '../context.js';
import type { AuthDefinition } from './generated/hub/auth/v1/Auth.js';
import type { GatewayDefinition } from './generated/hub/gateway/v1/Gateway.js';
import type { OAuthDefinition } from './generated/hub/oauth/v1/OAuth.js';
import type { ProxyRouterDefinition } from './generated/hub/proxy_router/v1/ProxyRouter.js';
import type { SpawnerDefinition } from './generated/hub/spawner/v1/Spawner.js';
import type { TokensDefinition } from './generated/hub/tokens/v1/Tokens.js';

/** Each actor's service, by actor name (shared/paths.ts ACTORS). */
export interface ServiceDefinitions {
  auth: AuthDefinition;
  tokens: TokensDefinition;
  oauth: OAuthDefinition;
  spawner: SpawnerDefinition;
  'proxy-router': ProxyRouterDefinition;
  gateway: GatewayDefinition;
}

export type ServiceActor = keyof ServiceDefinitions;

export interface CallOptions {
  /** absolute deadline (epoch ms); a handler passes its caller's on, so nested calls share one budget */
  deadline?: number;
  /** the request this call serves (id, who asked, client address); inside an actor's handler it is implicit */
  request?: RequestContext;
  /**
   * While the callee cannot be reached (restarting: nothing listens on its socket, no NATS responder), try again
   * for up to this many ms (within the deadline) instead of failing at once. Only a call that never reached it is
   * sent again, so nothing is done twice.
   */
  waitForCalleeMs?: number;
  /**
   * With waitForCalleeMs: a call whose connection dropped (the callee died, perhaps having received it) is sent again
   * too. Only for calls a second copy cannot harm (a server's start: the new spawner finds it pending or running).
   */
  repeatable?: boolean;
}

/** What a handler knows about the call it serves. */
export interface CallContext {
  /** the caller's absolute deadline (epoch ms): pass `{deadline}` to nested calls */
  readonly deadline: number;
  /** true once the caller has given up (deadline passed or call cancelled): start no side effect then */
  readonly cancelled: boolean;
  /** the request the call serves, when the caller said (shared/context.ts) */
  readonly request?: RequestContext;
}

/* eslint-disable @typescript-eslint/no-explicit-any -- `any` in the unused slots: they sit in both variances */
type RequestOf<M> = M extends MethodDefinition<infer Req, any, any, any> ? Req : never;
type ReplyOf<M> = M extends MethodDefinition<any, any, any, infer Reply> ? Reply : never;
type HandlerRequestOf<M> = M extends MethodDefinition<any, any, infer Req, any> ? Req : never;
type HandlerReplyOf<M> = M extends MethodDefinition<any, infer Reply, any, any> ? Reply : never;

/** The rpc names of a definition: the generated interfaces also carry grpc-js's string index signature. */
type Rpc<A extends ServiceActor> = keyof {
  [K in keyof ServiceDefinitions[A] as string extends K ? never : number extends K ? never : K]: true;
} & string;

/** `auth.getUser({name}, {deadline})` → the decoded `User`. Failures reject with a HubError. */
export type Client<A extends ServiceActor> = {
  [K in Rpc<A> as Uncapitalize<K>]:
    (request: RequestOf<ServiceDefinitions[A][K]>, options?: CallOptions) => Promise<ReplyOf<ServiceDefinitions[A][K]>>;
} & { close(): void };

/** One handler per rpc, typed by the same definition; throwing a HubError answers with it. */
export type Handlers<A extends ServiceActor> = {
  [K in Rpc<A>]:
    (request: HandlerRequestOf<ServiceDefinitions[A][K]>, call: CallContext) =>
      Promise<HandlerReplyOf<ServiceDefinitions[A][K]>> | HandlerReplyOf<ServiceDefinitions[A][K]>;
};

/** An actor's own handlers: Ping is answered by the actor runtime (shared/actor.ts). */
export type ActorHandlers<A extends ServiceActor> = Omit<Handlers<A>, 'Ping'>;

export type AuthClient = Client<'auth'>;
export type TokensClient = Client<'tokens'>;
export type OAuthClient = Client<'oauth'>;
export type SpawnerClient = Client<'spawner'>;
export type ProxyRouterClient = Client<'proxy-router'>;
export type GatewayClient = Client<'gateway'>;

/** The decoded reply of one rpc, e.g. `Reply<'auth', 'GetUser'>` (the generated `User__Output`). */
export type Reply<A extends ServiceActor, K extends keyof ServiceDefinitions[A]> = ReplyOf<ServiceDefinitions[A][K]>;
/** The request of one rpc as a caller writes it. */
export type Request<A extends ServiceActor, K extends keyof ServiceDefinitions[A]> = RequestOf<ServiceDefinitions[A][K]>;
