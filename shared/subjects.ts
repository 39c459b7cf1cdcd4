// Every NATS subject the hub uses is built here, so their shapes stay consistent and bad tokens are refused.
//   hub.<actor>.<verb>          commands and queries to an actor (queue groups for replicas)
//   hub.evt.<entity>.<change>   domain events (fan-out; caches listen here)
//   hub.audit.<entity>.<verb>   audit events, retained in the HUB_AUDIT JetStream stream

const TOKEN = /^[a-z][a-z0-9_-]{0,62}$/;

function token(t: string): string {
  if (!TOKEN.test(t)) throw new Error(`invalid subject token ${JSON.stringify(t)}`);
  return t;
}

export const subjects = {
  command: (actor: string, verb: string) => `hub.${token(actor)}.${token(verb)}`,
  event: (entity: string, change: string) => `hub.evt.${token(entity)}.${token(change)}`,
  audit: (entity: string, verb: string) => `hub.audit.${token(entity)}.${token(verb)}`,
  /** a subscription filter over audit events: `*` for any entity or verb (`hub audit --type 'server.*'`) */
  auditMatching: (entity: string, verb: string) => `hub.audit.${entity === '*' ? '*' : token(entity)}.${verb === '*' ? '*' : token(verb)}`,
  allAudit: 'hub.audit.>',
  allEvents: 'hub.evt.>',
} as const;

/** NATS service-framework name of an actor (`$SRV.PING.<name>` finds it). */
export function natsServiceName(actor: string): string {
  return `hub-${token(actor)}`;
}

export const AUDIT_STREAM = 'HUB_AUDIT';
