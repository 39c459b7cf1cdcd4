import { createHash } from 'node:crypto';
// Every NATS subject the hub uses is built here, so their shapes stay consistent and bad tokens are refused.
//   hub.<actor>.<verb>          commands and queries to an actor (queue groups for replicas)
//   hub.evt.<entity>.<change>   domain events (fan-out; caches listen here)
//   hub.audit.<entity>.<verb>   audit events, retained in the HUB_AUDIT JetStream stream
// Events say what happened; each consumer decides what it makes stale (see EVENT_FLOW below).

const TOKEN = /^[a-z][a-z0-9_-]{0,62}$/;

function token(t: string): string {
  if (!TOKEN.test(t)) throw new Error(`invalid subject token ${JSON.stringify(t)}`);
  return t;
}

/** Every domain event, by entity. */
export const EVENTS = {
  /** created/updated/deleted change what a user's tokens may do; `activity` ({name, last_activity}) changes nothing but the time */
  user: ['created', 'updated', 'deleted', 'activity'],
  /** membership changed: `users` lists whose scopes may change */
  group: ['created', 'updated', 'deleted'],
  session: ['revoked'],
  token: ['revoked'],
  /** an owner's effective scopes changed (admin flag, groups, roles, shares, deletion): identities resolved for it are stale */
  owner: ['changed'],
  server: ['spawning', 'ready', 'adopted', 'stopping', 'stopped', 'failed'],
  /** proxied traffic per route, from the gateways */
  activity: ['proxy'],
  route: ['unreachable'],
} as const;

export type EventEntity = keyof typeof EVENTS;
export type EventChange<E extends EventEntity> = (typeof EVENTS)[E][number];

/** Who publishes and who consumes each event; ARCHITECTURE.md shows the same table. */
export const EVENT_FLOW = {
  // auth follows user and group events when auth actors on several nodes share a database (their user indexes)
  auth: { publishes: ['user.*', 'group.*', 'session.revoked'], consumes: ['user.created', 'user.deleted', 'user.activity', 'group.created', 'group.deleted'] },
  // tokens hears owner.changed too: another tokens actor's change (a share; another node, or the one `hub restart` replaces)
  tokens: { publishes: ['token.revoked', 'owner.changed'], consumes: ['user.created', 'user.updated', 'user.deleted', 'group.*', 'owner.changed'] },
  spawner: { publishes: ['server.*'], consumes: ['activity.proxy'] },
  'proxy-router': { publishes: [], consumes: ['activity.proxy', 'route.unreachable'] },
  gateway: {
    publishes: ['activity.proxy', 'route.unreachable'],
    consumes: ['user.*', 'group.*', 'session.revoked', 'token.revoked', 'owner.changed'],
  },
  oauth: { publishes: [], consumes: ['token.revoked'] },
} as const;

/** The entities whose events an actor subscribes to (`hub.evt.<entity>.*`), from EVENT_FLOW's consumes. */
export function consumedEntities(actor: keyof typeof EVENT_FLOW): EventEntity[] {
  return [...new Set((EVENT_FLOW[actor].consumes as readonly string[]).map((c) => c.split('.')[0] as EventEntity))];
}

/**
 * The JetStream key-value buckets (their subjects are `$KV.<bucket>.<key>`), each with its one writer and the
 * actors that keep a copy: shared/nats-auth.ts gives each actor the bus permissions this table says.
 */
export const BUCKETS = { servers: 'hub_servers', routes: 'hub_routes', services: 'hub_services' } as const;

/**
 * Leases for work done once per hub (shared/lease.ts): every actor contends for its own keys only
 * (`$KV.hub_leases.<actor>.>`), and reads the bucket to see them.
 */
export const LEASE_BUCKET = 'hub_leases';

export const BUCKET_FLOW: Record<(typeof BUCKETS)[keyof typeof BUCKETS], { writer: string; readers: readonly string[] }> = {
  hub_servers: { writer: 'spawner', readers: ['gateway', 'proxy-router', 'oauth'] },
  hub_routes: { writer: 'proxy-router', readers: ['gateway'] },
  hub_services: { writer: 'tokens', readers: ['gateway', 'proxy-router', 'oauth'] },
};

/**
 * What each actor asks of others over NATS besides events (its own `hub.<actor>.>` it always answers):
 * `calls`, the actors whose rpcs it may call over NATS (`hub.<callee>.rpc.*`, shared/grpc.ts); `commands`,
 * `hub.<actor>.<verb>` subjects of others it sends to; `discovers`, the services it finds by `$SRV.PING`;
 * `heartbeats`, whose liveness it follows. `*` = every actor.
 */
export const COMMAND_FLOW: Record<string, { calls: readonly string[]; commands: readonly string[]; discovers: readonly string[]; heartbeats: readonly string[] }> = {
  gateway: {
    calls: ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router'],
    commands: ['spawner.activity', 'tokens.activity', 'supervisor.shutdown', '*.metrics'],
    discovers: ['*'], heartbeats: ['*'],
  },
  spawner: { calls: ['tokens', 'oauth'], commands: ['gateway.servers-applied'], discovers: ['gateway', 'spawner'], heartbeats: [] },
  tokens: { calls: ['auth', 'oauth'], commands: [], discovers: [], heartbeats: [] },
  oauth: { calls: ['tokens', 'auth'], commands: [], discovers: [], heartbeats: [] },
  auth: { calls: [], commands: [], discovers: [], heartbeats: [] },
  'proxy-router': { calls: [], commands: [], discovers: [], heartbeats: [] },
};

export const subjects = {
  command: (actor: string, verb: string) => `hub.${token(actor)}.${token(verb)}`,
  /** an rpc of the actor's gRPC service carried over NATS (between nodes, shared/grpc.ts); '' = the prefix */
  rpc: (actor: string, method: string) => `hub.${token(actor)}.rpc.${method ? token(method.toLowerCase()) : ''}`,
  /**
   * an rpc of one node's instance of an actor (a spawner forwards a request to the node that owns the server);
   * node names allow characters subjects do not, so the node is a hash of its name. '' = the prefix
   */
  nodeRpc: (actor: string, node: string, method: string) =>
    `hub.${token(actor)}.node.n${createHash('sha256').update(node).digest('hex').slice(0, 16)}.rpc.${method ? token(method.toLowerCase()) : ''}`,
  /** the prefix of an actor's commands (its NATS service group) */
  commandGroup: (actor: string) => `hub.${token(actor)}`,
  event: <E extends EventEntity>(entity: E, change: EventChange<E>) => `hub.evt.${token(entity)}.${token(change)}`,
  /** every change of one entity */
  eventsOf: (entity: EventEntity) => `hub.evt.${token(entity)}.*`,
  audit: (entity: string, verb: string) => `hub.audit.${token(entity)}.${token(verb)}`,
  /** a subscription filter over audit events: `*` for any entity or verb (`hub audit --type 'server.*'`) */
  auditMatching: (entity: string, verb: string) => `hub.audit.${entity === '*' ? '*' : token(entity)}.${verb === '*' ? '*' : token(verb)}`,
  allAudit: 'hub.audit.>',
  allEvents: 'hub.evt.>',
} as const;

/** `hub.evt.<entity>.<change>` → its parts (for consumers of several events on one subscription). */
export function parseEventSubject(subject: string): { entity: string; change: string } {
  const [, , entity = '', change = ''] = subject.split('.');
  return { entity, change };
}

/** NATS service-framework name of an actor (`$SRV.PING.<name>` finds it). */
export function natsServiceName(actor: string): string {
  return `hub-${token(actor)}`;
}

export const AUDIT_STREAM = 'HUB_AUDIT';
