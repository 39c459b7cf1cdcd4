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
  auth: { publishes: ['user.*', 'group.*', 'session.revoked'], consumes: [] },
  tokens: { publishes: ['token.revoked', 'owner.changed'], consumes: ['user.created', 'user.updated', 'user.deleted', 'group.*'] },
  spawner: { publishes: ['server.*'], consumes: ['activity.proxy'] },
  'proxy-router': { publishes: [], consumes: ['activity.proxy', 'route.unreachable'] },
  gateway: {
    publishes: ['activity.proxy', 'route.unreachable'],
    consumes: ['user.*', 'group.*', 'session.revoked', 'token.revoked', 'owner.changed'],
  },
  oauth: { publishes: [], consumes: ['token.revoked'] },
} as const;

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
