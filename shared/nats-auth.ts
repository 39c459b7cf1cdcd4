// Who may do what on the hub's NATS. Every actor connects as its own NATS user whose permissions name only its
// own subjects (from shared/subjects.ts: EVENT_FLOW, COMMAND_FLOW, BUCKET_FLOW) plus the JetStream API subjects
// of the buckets and stream it uses, so a compromised actor cannot speak as another. Two read-only users serve
// operators: `audit` (the audit stream and `hub.audit.>`) and `metrics` (scrapes and discovery). `admin` may do
// everything: the operator's own key to the bus (and the tests'), never given to an actor.
// Passwords are derived from the hub's NATS secret (HUB_NATS_TOKEN when given, so every node of a cluster
// derives the same; else made once per hub and kept in the data dir, 0600), so nothing else needs storing.
import { createHmac } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ACTORS, type ActorName } from './paths.js';
import { newToken } from './secrets.js';
import { AUDIT_STREAM, BUCKET_FLOW, COMMAND_FLOW, consumedEntities, EVENT_FLOW, LEASE_BUCKET, natsServiceName, subjects } from './subjects.js';

/** The supervisor hands each actor its user and password in these (nothing else carries them). */
export const NATS_USER_ENV = 'HUB_NATS_USER';
export const NATS_PASSWORD_ENV = 'HUB_NATS_PASSWORD';
/** The operator's (and tests') user: no limits; its password is the hub's NATS secret itself. */
export const ADMIN_USER = 'admin';
/** Read-only credentials an operator can print (`hub credentials audit|metrics`). */
export const OPERATOR_CREDENTIALS = ['audit', 'metrics'] as const;
export type OperatorCredential = (typeof OPERATOR_CREDENTIALS)[number];
export type BusUser = ActorName | OperatorCredential;
export const BUS_USERS: readonly BusUser[] = [...ACTORS, ...OPERATOR_CREDENTIALS];

/** Where the hub keeps its NATS secret (0600): the CLI derives the operator credentials from it. */
export const busSecretPath = (dataDir: string): string => join(dataDir, 'nats.secret');

const SECRET_SHAPE = /^[A-Za-z][A-Za-z0-9_]{15,}$/;
export const SECRET_SHAPE_TEXT = '16 or more letters, digits and "_", starting with a letter';
export const validBusSecret = (s: string): boolean => SECRET_SHAPE.test(s);

/**
 * The hub's NATS secret: `given` (HUB_NATS_TOKEN) when set, kept for the command line; else the one made at the
 * first start. Only the supervisor creates it (`create`); the command line reads it (null when none yet).
 */
export function busSecret(dataDir: string, given: string | undefined, create: boolean): string | null {
  const file = busSecretPath(dataDir);
  const kept = existsSync(file) ? readFileSync(file, 'utf8').trim() : '';
  if (given) {
    if (create && given !== kept) writeFileSync(file, given, { mode: 0o600 });
    return given;
  }
  if (kept || !create) return kept || null;
  const made = `hub_${newToken()}`;
  writeFileSync(file, made, { mode: 0o600, flag: 'wx' });
  return made;
}

/** A bus user's password: a keyed hash of the secret and the user's name (43 URL-safe characters). */
export function busPassword(secret: string, user: string): string {
  return user === ADMIN_USER ? secret : createHmac('sha256', secret).update(`hub nats user ${user}`).digest('base64url');
}

/** Each user's replies arrive under its own inbox prefix, so no user may subscribe to another's replies. */
export const inboxPrefix = (user: string): string => `_INBOX.${user}`;

export interface BusPermissions {
  publish: string[];
  subscribe: string[];
  /** may answer the requests it receives (a one-time right to each message's reply subject) */
  allow_responses: boolean;
}

const everyActor = (names: readonly string[]): string[] => names.flatMap((n) => (n === '*' ? [...ACTORS] : [n]));
const eventSubject = (pattern: string): string => `hub.evt.${pattern}`;

/** The JetStream API subjects a reader of one stream uses: its info, its ordered consumers, direct gets. */
function streamReader(stream: string): string[] {
  return [
    `$JS.API.STREAM.INFO.${stream}`, `$JS.API.STREAM.MSG.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}`, `$JS.API.DIRECT.GET.${stream}.>`,
    `$JS.API.CONSUMER.CREATE.${stream}`, `$JS.API.CONSUMER.CREATE.${stream}.>`,
    `$JS.API.CONSUMER.INFO.${stream}.>`, `$JS.API.CONSUMER.DELETE.${stream}.>`, `$JS.API.CONSUMER.MSG.NEXT.${stream}.>`,
    `$JS.FC.${stream}.>`, `$JS.ACK.${stream}.>`,
  ];
}

const kvStream = (bucket: string): string => `KV_${bucket}`;

/** What one user may publish and subscribe to. */
export function busPermissions(user: BusUser): BusPermissions {
  const inbox = `${inboxPrefix(user)}.>`;
  if (user === 'audit') {
    return { publish: ['$JS.API.INFO', ...streamReader(AUDIT_STREAM)], subscribe: [subjects.allAudit, inbox], allow_responses: false };
  }
  if (user === 'metrics') {
    return {
      publish: ['$SRV.PING', ...ACTORS.flatMap((a) => [subjects.command(a, 'metrics'), ...['PING', 'INFO', 'STATS'].map((v) => `$SRV.${v}.${natsServiceName(a)}`)])],
      subscribe: [...ACTORS.map((a) => subjects.command(a, 'heartbeat')), inbox],
      allow_responses: false,
    };
  }
  const own = `${subjects.commandGroup(user)}.>`;
  const service = natsServiceName(user);
  const flow = COMMAND_FLOW[user];
  const events = EVENT_FLOW[user];
  const publish = [
    own, subjects.allAudit,
    '$JS.API.INFO', `$JS.API.STREAM.INFO.${AUDIT_STREAM}`, `$JS.API.STREAM.CREATE.${AUDIT_STREAM}`, `$JS.API.STREAM.UPDATE.${AUDIT_STREAM}`,
    ...events.publishes.map(eventSubject),
    ...everyActor(flow.calls).map((a) => `${subjects.rpc(a, '')}*`),
    ...flow.commands.flatMap((c) => {
      const [actor, verb] = c.split('.');
      return everyActor([actor]).map((a) => subjects.command(a, verb));
    }),
    ...everyActor(flow.discovers).map((a) => `$SRV.PING.${natsServiceName(a)}`),
  ];
  const subscribe = [
    own, inbox, subjects.command('supervisor', 'shutdown'), subjects.command('supervisor', 'reload'), '$SRV.*', `$SRV.*.${service}`, `$SRV.*.${service}.>`,
    // every change of each entity it consumes (the tokens actor reads user.* to act on three of them)
    ...consumedEntities(user).map((e) => subjects.eventsOf(e)),
    ...everyActor(flow.heartbeats).map((a) => subjects.command(a, 'heartbeat')),
  ];
  for (const [bucket, { writer, readers }] of Object.entries(BUCKET_FLOW)) {
    if (writer !== user && !readers.includes(user)) continue;
    // a reader may create the bucket too: whichever actor comes first makes it (shared/nats.ts openKv)
    for (const subject of [...streamReader(kvStream(bucket)), `$JS.API.STREAM.CREATE.${kvStream(bucket)}`]) publish.push(subject);
    if (writer === user) publish.push(`$KV.${bucket}.>`);
  }
  // leases (shared/lease.ts): the bucket for everyone, keys only its own
  // (pushed one by one: no spread into a call at run time, test/contracts/no-spread.test.ts)
  for (const subject of [...streamReader(kvStream(LEASE_BUCKET)), `$JS.API.STREAM.CREATE.${kvStream(LEASE_BUCKET)}`, `$KV.${LEASE_BUCKET}.${user}.>`]) publish.push(subject);
  return { publish: [...new Set(publish)], subscribe: [...new Set(subscribe)], allow_responses: true };
}

/**
 * How long after a request its receiver may still answer it: nats-server's default is 2 minutes, and a start that
 * crosses nodes may wait longer than that for its server (Spawner.start_timeout, a batch queue).
 */
const RESPONSE_WINDOW = '1h';

/** The `authorization` block of a nats-server configuration: the admin and every bus user with its permissions. */
export function natsAuthorization(secret: string): string {
  const q = (v: string | number): string => JSON.stringify(v);
  const list = (xs: string[]) => `[${xs.map(q).join(', ')}]`;
  const users = [
    `    {user: ${q(ADMIN_USER)}, password: ${q(secret)}}`,
    ...BUS_USERS.map((u) => {
      const p = busPermissions(u);
      return `    {user: ${q(u)}, password: ${q(busPassword(secret, u))}, permissions: {\n`
        + `      publish: {allow: ${list(p.publish)}},\n      subscribe: {allow: ${list(p.subscribe)}}${p.allow_responses ? `,\n      allow_responses: {max: 1, expires: ${q(RESPONSE_WINDOW)}}` : ''}\n    }}`;
    }),
  ];
  return `authorization {\n  users = [\n${users.join(',\n')}\n  ]\n}\n`;
}

/** What a process needs to connect as one bus user (shared/nats.ts connectNats). */
export interface BusAuth { user: string; pass: string; inboxPrefix?: string }

export function busAuth(secret: string, user: string): BusAuth {
  return { user, pass: busPassword(secret, user), ...(user === ADMIN_USER ? {} : { inboxPrefix: inboxPrefix(user) }) };
}

/** The environment that makes an actor connect as its own user. */
export function busEnv(secret: string, user: BusUser): Record<string, string> {
  return { [NATS_USER_ENV]: user, [NATS_PASSWORD_ENV]: busPassword(secret, user) };
}

/** An actor's own user, from the environment the supervisor gave it (undefined outside a supervised hub). */
export function busAuthFromEnv(env: NodeJS.ProcessEnv = process.env): BusAuth | undefined {
  const user = env[NATS_USER_ENV];
  const pass = env[NATS_PASSWORD_ENV];
  return user && pass ? { user, pass, inboxPrefix: inboxPrefix(user) } : undefined;
}

/** `nats://user:password@host:port` (or tls://) for each of the hub's NATS URLs. */
export function credentialUrl(url: string, auth: BusAuth): string {
  const u = new URL(url);
  u.username = encodeURIComponent(auth.user);
  u.password = encodeURIComponent(auth.pass);
  return u.toString().replace(/\/$/, '');
}
