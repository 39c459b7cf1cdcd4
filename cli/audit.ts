// `hub audit [--follow] [--since 1h] [--type 'server.*'] [--who alice] [--json]`: the audit trail, read from the
// JetStream stream HUB_AUDIT on the hub's NATS (shared/audit.ts writes it). One readable line per event, or the
// stored event as one JSON line. Reading needs NATS only: an external NATS (Hub.nats_url) can be read while the
// hub is down. Every wait is bounded: connecting, each request, and the silence tolerated before all events
// already stored have arrived; --follow waits for new events until Ctrl-C.
import { connect, type ConsumerMessages, type JsMsg, type NatsConnection } from 'nats';
import { natsUrl } from '../shared/actor.js';
import { natsServers } from '../shared/config.js';
import { AUDIT_STREAM, subjects } from '../shared/subjects.js';
import { UsageError } from './args.js';
import { connectOptions, operatorNatsLink } from './credentials.js';
import { CliError, runningHub } from './hub.js';
import type { VerbInput } from './main.js';

const CONNECT_TIMEOUT_MS = 3000;
const REQUEST_TIMEOUT_MS = 5000;
/** without --follow: longest silence while stored events are still due */
const STALL_MS = 10_000;
/** with --follow: reconnection attempts (one a second) before giving up on a NATS that went away */
const FOLLOW_RECONNECTS = 60;

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** `30m`, `1h`, `7d`, `2w` ago, or an ISO 8601 date. */
export function parseSince(text: string, now = Date.now()): Date {
  const m = /^(\d{1,9})([smhdw])$/.exec(text);
  const t = m ? now - Number(m[1]) * UNIT_MS[m[2]] : /^\d{4}-\d\d-\d\d/.test(text) ? Date.parse(text) : NaN;
  if (!Number.isFinite(t) || t < 0) {
    throw new UsageError(`audit: --since expects a duration such as 30m, 1h or 7d, or a date such as 2026-11-24T08:00Z; got ${JSON.stringify(text.slice(0, 40))}`);
  }
  return new Date(t);
}

/** A glob (`*` = anything) as an anchored, case-insensitive pattern. */
function globPattern(glob: string): RegExp {
  return new RegExp(`^${glob.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`, 'i');
}

/** The narrowest JetStream filter for a --type glob: the server skips what cannot match. */
function subjectFilter(type: string | undefined): string {
  const parts = type?.split('.') ?? [];
  if (parts.length === 2) {
    try {
      return subjects.auditMatching(parts[0], parts[1]);
    } catch {
      // a glob inside a token (`user.set_*`): filtered here instead
    }
  }
  return subjects.allAudit;
}

/** An event of the audit schema v1 (README, "Operating it"). */
interface AuditRecord { v?: unknown; time?: unknown; type?: unknown; who?: unknown; what?: unknown; outcome?: unknown; details?: unknown; [k: string]: unknown }

/** Events carry names people typed: no control, bidi or line-separator character reaches the terminal raw. */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const escapeUnsafe = (s: string) => s.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

function show(v: unknown): string {
  if (typeof v === 'string' && /^[\w.:@/+,#-]+$/.test(v)) return v;
  return escapeUnsafe(JSON.stringify(v) ?? 'null');
}

const SHOWN_FIRST = new Set(['v', 'time', 'type', 'outcome', 'who', 'what', 'details']);

/** `2026-11-24T08:00:00.000Z  user.create  ok  who=cli:root  what=alice  actor=auth  admin=true` */
export function readableLine(e: AuditRecord): string {
  const parts = [show(e.time), show(e.type), show(e.outcome), `who=${show(e.who)}`];
  if (e.what !== undefined) parts.push(`what=${show(e.what)}`);
  for (const [k, v] of Object.entries(e)) if (!SHOWN_FIRST.has(k) && v !== undefined && v !== '') parts.push(`${escapeUnsafe(k)}=${show(v)}`);
  const details = e.details && typeof e.details === 'object' ? Object.entries(e.details as Record<string, unknown>) : [];
  for (const [k, v] of details) parts.push(`${escapeUnsafe(k)}=${show(v)}`);
  return parts.join('  ');
}

/** Names in the URL's user info (nats://user:secret@host) are not printed. */
function safeUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.username || u.password) { u.username = '***'; u.password = ''; }
    return u.toString().replace(/\/$/, '');
  } catch {
    return url;
  }
}

export async function audit({ config, flags }: VerbInput): Promise<number> {
  const since = typeof flags.since === 'string' ? parseSince(flags.since) : undefined;
  const type = typeof flags.type === 'string' ? flags.type : undefined;
  if (type !== undefined && !/^[a-z0-9_*-]+(\.[a-z0-9_*-]+)?$/i.test(type)) {
    throw new UsageError(`audit: --type expects <entity>.<verb> with * for any part, such as 'server.*' or 'user.create'; got ${JSON.stringify(type.slice(0, 40))}`);
  }
  const typeGlob = type === undefined || type.includes('.') ? type : `${type}.*`; // `--type user`: every user event
  const typeMatch = typeGlob === undefined ? null : globPattern(typeGlob);
  const whoMatch = typeof flags.who === 'string' ? globPattern(flags.who) : null;
  const follow = flags.follow === true;
  const json = flags.json === true;

  const hub = runningHub(config);
  const url = natsUrl(hub?.config ?? config);
  const where = `the hub's NATS at ${safeUrl(url)}`;
  // as the audit credential: it may read the audit stream and nothing else (shared/nats-auth.ts)
  const link = operatorNatsLink(hub?.config ?? config, 'audit');
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: natsServers(url), name: 'hub-cli-audit', timeout: CONNECT_TIMEOUT_MS, waitOnFirstConnect: false, ...connectOptions(link),
      maxReconnectAttempts: follow ? FOLLOW_RECONNECTS : 0, reconnectTimeWait: 1000,
    });
  } catch (e) {
    throw new CliError(`cannot reach ${where} (${(e as Error).message})${hub ? '' : `: no hub is running with data dir ${config.Hub.data_dir}`}`);
  }
  try {
    const jsm = await nc.jetstreamManager({ timeout: REQUEST_TIMEOUT_MS });
    try {
      await jsm.streams.info(AUDIT_STREAM);
    } catch (e) {
      if (/not found/i.test((e as Error).message)) throw new CliError(`no audit trail at ${where}: the stream ${AUDIT_STREAM} does not exist (has the hub ever run there?)`);
      throw e;
    }
    const consumer = await nc.jetstream({ timeout: REQUEST_TIMEOUT_MS }).consumers.get(AUDIT_STREAM, {
      filterSubjects: subjectFilter(typeGlob),
      ...(since ? { opt_start_time: since.toISOString() } : {}),
    });
    // how many stored events match the server-side filter now: without --follow, the end of the listing
    const due = (await consumer.info()).num_pending;
    if (!follow && due === 0) return 0;
    const messages = await consumer.consume({ max_messages: 256, expires: REQUEST_TIMEOUT_MS });
    return await print(messages, { follow, json, typeMatch, whoMatch, nc, where });
  } catch (e) {
    if (e instanceof CliError || e instanceof UsageError) throw e;
    throw new CliError(`reading ${AUDIT_STREAM} at ${where} failed: ${(e as Error).message}`);
  } finally {
    await nc.close().catch(() => undefined);
  }
}

async function print(messages: ConsumerMessages, o: {
  follow: boolean; json: boolean; typeMatch: RegExp | null; whoMatch: RegExp | null; nc: NatsConnection; where: string;
}): Promise<number> {
  let lastMessageAt = Date.now();
  let stopped: 'interrupted' | 'stalled' | 'lost' | null = null;
  const stop = (why: NonNullable<typeof stopped>) => {
    stopped ??= why;
    messages.stop();
  };
  const onInterrupt = () => stop('interrupted');
  process.once('SIGINT', onInterrupt);
  process.once('SIGTERM', onInterrupt);
  process.stdout.on('error', onInterrupt); // the reader went away (`hub audit | head`)
  const stall = o.follow ? undefined : setInterval(() => { if (Date.now() - lastMessageAt > STALL_MS) stop('stalled'); }, 500);
  void o.nc.closed().then(() => stop('lost'));
  try {
    for await (const m of messages) {
      lastMessageAt = Date.now();
      const event = decode(m);
      if (event && matches(event, o.typeMatch, o.whoMatch)) {
        process.stdout.write(`${o.json ? escapeUnsafe(JSON.stringify(event)) : readableLine(event)}\n`);
      }
      if (!o.follow && m.info.pending === 0) break;
    }
  } finally {
    clearInterval(stall);
    process.off('SIGINT', onInterrupt);
    process.off('SIGTERM', onInterrupt);
    messages.stop();
  }
  if (stopped === 'stalled') throw new CliError(`${o.where} stopped delivering audit events (none for ${STALL_MS / 1000} s while more were due)`);
  if (stopped === 'lost') throw new CliError(`lost ${o.where}`);
  return 0;
}

function decode(m: JsMsg): AuditRecord | null {
  try {
    const v = m.json<AuditRecord>();
    if (v && typeof v === 'object' && !Array.isArray(v)) return v;
  } catch {
    // fall through: not JSON
  }
  process.stderr.write(`hub audit: event ${m.seq} on ${escapeUnsafe(m.subject)} is not a JSON object; skipped\n`);
  return null;
}

function matches(e: AuditRecord, typeMatch: RegExp | null, whoMatch: RegExp | null): boolean {
  if (typeMatch && !typeMatch.test(String(e.type))) return false;
  if (whoMatch) {
    // `--who alice` finds `user:alice`; `--who 'cli:*'` every operator
    const who = typeof e.who === 'string' ? e.who : '';
    if (!whoMatch.test(who) && !whoMatch.test(who.slice(who.indexOf(':') + 1))) return false;
  }
  return true;
}
