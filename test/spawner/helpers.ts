// Reading what the spawner recorded, and following a progress stream, for spawner tests.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect } from 'nats';
import { fileURLToPath } from 'node:url';
import { NATS_ADMIN } from '../harness.js';
import { SERVERS_BUCKET, serverKey, type ServerRecord } from '../../shared/servers.js';

export const FIXTURE = fileURLToPath(new URL('../fixtures/server.mjs', import.meta.url));

/** The registry entry of a server, straight from the KV bucket (null when absent). */
export async function serverRecord(natsUrl: string, user: string, name = ''): Promise<ServerRecord | null> {
  const nc = await connect({ servers: natsUrl, ...NATS_ADMIN });
  try {
    const kv = await nc.jetstream().views.kv(SERVERS_BUCKET, { history: 1 });
    const e = await kv.get(serverKey(user, name));
    return e && e.operation === 'PUT' ? JSON.parse(new TextDecoder().decode(e.value)) : null;
  } finally {
    await nc.close();
  }
}

export interface Stream { events: any[]; lines: string[]; ended: boolean; arrivals: number[] }

/** Reads an SSE stream until it ends or `timeoutMs` passes; returns the parsed `data:` events. */
export async function readProgress(url: string, token: string, timeoutMs = 15_000): Promise<Stream & { status: number; contentType: string }> {
  const r = await fetch(url, { headers: { authorization: `token ${token}` }, signal: AbortSignal.timeout(timeoutMs) });
  const out: Stream = { events: [], lines: [], ended: false, arrivals: [] };
  if (r.status !== 200 || !r.body) return { ...out, status: r.status, contentType: r.headers.get('content-type') ?? '' };
  const decoder = new TextDecoder();
  let buffered = '';
  try {
    for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(chunk, { stream: true });
      let i: number;
      while ((i = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, i);
        buffered = buffered.slice(i + 1);
        out.lines.push(line);
        if (line.startsWith('data:')) {
          out.events.push(JSON.parse(line.slice(5)));
          out.arrivals.push(Date.now());
        }
      }
    }
    out.ended = true;
  } catch {
    // timed out: `ended` stays false
  }
  return { ...out, status: r.status, contentType: r.headers.get('content-type') ?? '' };
}

/**
 * Starts a user's default server through the API and waits (bounded) until it is ready: 201 at once, or 202 then
 * ready; throws the start's failure message (its last progress line) otherwise.
 */
export async function startAndWaitReady(hubUrl: string, token: string, user: string, body: Record<string, unknown> = {}, timeoutMs = 150_000): Promise<void> {
  const { apiClient } = await import('../api/client.js');
  const { waitFor } = await import('../harness.js');
  const api = apiClient(hubUrl);
  const r = await api('POST', `/users/${user}/server`, { token, body });
  if (r.status === 201) return;
  if (r.status !== 202) throw new Error(`start of ${user}'s server: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`${user}'s server ready`, async () => {
    const s = (await api('GET', `/users/${user}`, { token })).body.servers[''];
    if (!s) throw new Error(`${user}'s server failed to start: ${(await readProgress(`${hubUrl}/hub/api/users/${user}/server/progress`, token)).events.at(-1)?.message}`);
    return s.ready ? true : undefined;
  }, timeoutMs, 250);
}

export const PROBE = fileURLToPath(new URL('../fixtures/probe-server.mjs', import.meta.url));

/** System accounts for a test: unique names per run, removed (with their homes) afterwards. */
export function systemAccounts(prefix: string) {
  const made: { users: string[]; groups: string[] } = { users: [], groups: [] };
  const suffix = randomBytes(3).toString('hex');
  return {
    name: (role: string) => `${prefix}${role}${suffix}`,
    addGroup(name: string) {
      execFileSync('groupadd', [name]);
      made.groups.push(name);
    },
    /** as an operator would make them for a hub: `useradd -m` with a private home */
    addUser(name: string, groups: string[] = []) {
      made.users.push(name);
      execFileSync('useradd', ['-m', '-K', 'HOME_MODE=0700', ...(groups.length ? ['-G', groups.join(',')] : []), name]);
    },
    /** also forgets accounts the hub created, when named here */
    expect(name: string) {
      made.users.push(name);
    },
    removeAll() {
      for (const u of made.users) spawnSync('userdel', ['-r', u], { stdio: 'ignore' });
      for (const g of made.groups) spawnSync('groupdel', [g], { stdio: 'ignore' });
    },
  };
}

export function account(name: string): { uid: number; gid: number; home: string; shell: string } {
  const [, , uid, gid, , home, shell] = execFileSync('getent', ['passwd', name], { encoding: 'utf8' }).trim().split(':');
  return { uid: Number(uid), gid: Number(gid), home, shell };
}

export const groupId = (name: string) => Number(execFileSync('getent', ['group', name], { encoding: 'utf8' }).split(':')[2]);

/** GET <target><url><path> of a probe server, as JSON. */
export async function probe(rec: ServerRecord, path: string): Promise<any> {
  const r = await fetch(`${rec.target}${rec.url}${path}`, { signal: AbortSignal.timeout(20_000) });
  return r.json();
}

export interface AuditEvent { type: string; who: string; what: string; outcome: string; reason: string | null; details: Record<string, unknown> }

/** Everything in the HUB_AUDIT stream so far, read as an operator's tool would (an ordered consumer). */
export async function auditTrail(natsUrl: string): Promise<AuditEvent[]> {
  const nc = await connect({ servers: natsUrl, ...NATS_ADMIN });
  try {
    const consumer = await nc.jetstream().consumers.get('HUB_AUDIT');
    const out: AuditEvent[] = [];
    const pending = (await consumer.info()).num_pending;
    if (!pending) return out;
    for await (const m of await consumer.fetch({ max_messages: pending, expires: 3000 })) {
      out.push(m.json<AuditEvent>());
      if (m.info.pending === 0) break;
    }
    return out;
  } finally {
    await nc.close();
  }
}
