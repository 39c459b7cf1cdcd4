// The slurm backend against a real slurmctld + slurmd (+ munged) started here: servers are batch jobs, run as
// their users' accounts, report where they listen, and stop in the hub when SLURM ends their job.
import test, { type ExecutionContext } from 'ava';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { isAlive, NATS_TOKEN, runHubCommand, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { auditTrail, FIXTURE, readProgress, serverRecord, systemAccounts } from './helpers.js';
import { startSlurmCluster, type SlurmCluster } from './slurm-cluster.js';

const ADMIN = randomToken();
const POLL_S = 1;
const accounts = systemAccounts('hs');
const [QUEUED, OUTSIDE, LIMITED, KEEPER, LATE, RELAYED] = ['q', 'o', 'l', 'k', 'w', 'r'].map((r) => accounts.name(r));
let cluster: SlurmCluster;
let hub: HubUnderTest;
let api: ApiCall;
/** the time-limit job starts first, so its minute overlaps the other tests */
let limited: Promise<{ job: string; started: number }>;

const jobOf = async (user: string, name = '') => String((await serverRecord(hub.natsUrl, user, name))!.spawner_state.job_id);
const squeue = (job: string) => cluster.run('squeue', ['--noheader', '--states=all', `--jobs=${job}`, '--format=%T|%u|%N']).trim();
const serversOf = async (user: string) => (await api('GET', `/users/${user}`, { token: ADMIN })).body.servers as Record<string, any>;
/** What the progress stream of a server that is not running says: one failed event with how it ended. */
async function endedEvent(t: ExecutionContext, user: string): Promise<string> {
  const p = await readProgress(`${hub.url}/hub/api/users/${user}/server/progress`, ADMIN, 10_000);
  t.is(p.status, 200, 'a server that ended by itself has a progress stream that says why');
  t.true(p.ended && p.events.length === 1 && p.events[0].failed === true && p.events[0].progress === 100, JSON.stringify(p.events));
  return String(p.events[0]?.message ?? '');
}

test.before(async () => {
  cluster = await startSlurmCluster();
  for (const u of [QUEUED, OUTSIDE, LIMITED, KEEPER, LATE, RELAYED]) accounts.addUser(u);
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'slurm', allow_named_servers: true },
      Authenticator: { admin_users: ['boss'] },
      Spawner: {
        cmd: [process.execPath, FIXTURE], poll_interval: 0.5, slow_spawn_timeout: 0, start_timeout: 60,
        profiles: [
          { name: 'plain', display_name: 'Plain', default: true },
          // held until the test releases it: a real queued job
          { name: 'held', display_name: 'Held', overrides: { 'SlurmSpawner.req_options': ['--hold'] } },
          { name: 'short', display_name: 'One minute', overrides: { 'SlurmSpawner.req_runtime': '1' } },
          // the job wrapper reports a host that is not the job's node
          { name: 'liar', display_name: 'Liar', overrides: { 'Spawner.environment': { HUB_SLURM_REPORT_HOST: 'elsewhere.invalid' } } },
        ],
      },
      SlurmSpawner: { slurm_conf: cluster.conf, partition: cluster.partition, req_memory: '100M', poll_interval: POLL_S },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: [QUEUED, OUTSIDE, LIMITED, KEEPER, LATE, RELAYED] } });
  if (made.status !== 201) throw new Error(`users: ${made.status}`);
  limited = (async () => {
    const r = await api('POST', `/users/${LIMITED}/server`, { token: ADMIN, body: { profile: 'short' } });
    if (r.status !== 202 && r.status !== 201) throw new Error(`short start: ${r.status}`);
    await waitFor('the one-minute server', async () => ((await serversOf(LIMITED))['']?.ready ? true : undefined), 60_000, 200);
    return { job: await jobOf(LIMITED), started: Date.now() };
  })();
  limited.catch(() => undefined);
});

test.after.always(async () => {
  await hub?.stop();
  await cluster?.stop();
  accounts.removeAll();
});

test.serial('slurm: a held job shows queued, then running on its node, then ready; reachable through the gateway; stop cancels it', async (t) => {
  t.is((await api('POST', `/users/${QUEUED}/server`, { token: ADMIN, body: { profile: 'held' } })).status, 202);
  const job = await waitFor('the job id', async () => (await serverRecord(hub.natsUrl, QUEUED))?.spawner_state?.job_id as string | undefined, 20_000);
  t.regex(squeue(job), new RegExp(`^PENDING\\|${QUEUED}\\|`), 'queued, as the user');
  const progress = readProgress(`${hub.url}/hub/api/users/${QUEUED}/server/progress`, ADMIN, 60_000);
  await waitFor('the queued line', async () => ((await serverRecord(hub.natsUrl, QUEUED))!.progress.some((p) => /is queued/.test(p.message)) ? true : undefined), 10_000);
  t.is((await serversOf(QUEUED))[''].pending, 'spawn');
  cluster.run('scontrol', ['release', job]);
  const stream = await progress;
  const messages = stream.events.map((e) => e.message as string);
  const at = (re: RegExp) => messages.findIndex((m) => re.test(m));
  t.true(at(/^Submitted SLURM job \d+/) >= 0, messages.join(' | '));
  t.true(at(/is queued \(JobHeldUser\)/) > at(/^Submitted/), messages.join(' | '));
  t.true(at(new RegExp(`is running on ${hostname()}`)) > at(/is queued/), messages.join(' | '));
  t.true(at(/listens on/) > at(/is running/), messages.join(' | '));
  t.true(stream.events.at(-1).ready);
  t.deepEqual(stream.events.map((e) => e.progress), [...stream.events.map((e) => e.progress)].sort((a, b) => a - b), 'progress only goes up');

  const rec = (await serverRecord(hub.natsUrl, QUEUED))!;
  t.regex(rec.target, new RegExp(`^http://${hostname()}:\\d+$`));
  const through = await fetch(`${hub.url}/user/${QUEUED}/`);
  t.is(through.status, 200);
  t.is(await through.text(), `fixture for ${QUEUED}\n`);
  t.regex(squeue(job), /^RUNNING\|/);

  t.is((await api('DELETE', `/users/${QUEUED}/server`, { token: ADMIN })).status, 204);
  t.notRegex(squeue(job), /^(PENDING|RUNNING|COMPLETING)/, 'the job has ended');
  t.is(cluster.run('squeue', ['--noheader', `--jobs=${job}`]).trim(), '', 'gone from squeue');
  t.deepEqual(await serversOf(QUEUED), {});
});

test.serial('slurm: the location report takes only the server\'s own token, once, with a valid body', async (t) => {
  t.is((await api('POST', `/users/${OUTSIDE}/server`, { token: ADMIN })).status, 202);
  await waitFor('ready', async () => ((await serversOf(OUTSIDE))['']?.ready ? true : undefined), 30_000, 100);
  const rec = (await serverRecord(hub.natsUrl, OUTSIDE))!;
  const env = await (await fetch(`${rec.target}${rec.url}env`)).json() as { hub: Record<string, string> };
  const own = env.hub.HUB_API_TOKEN;
  t.is(env.hub.HUB_SERVICE_URL, `${rec.target.replace(hostname(), '0.0.0.0')}${rec.url}`, 'the server was told the port it reported');
  const path = `/users/${OUTSIDE}/server/location`;
  t.is((await api('POST', path, { token: ADMIN, body: { host: 'elsewhere', port: 80 } })).status, 403, 'not even an admin');
  t.is((await api('POST', `/users/${QUEUED}/server/location`, { token: own, body: { host: 'elsewhere', port: 80 } })).status, 404, 'not another user\'s server');
  for (const body of [{ host: 'bad host', port: 80 }, { host: 'ok', port: 0 }, { host: 'ok' }, { host: 'ok', port: 80, extra: 1 }, []]) {
    const r = await api('POST', path, { token: own, body });
    t.is(r.status, 400, JSON.stringify(body));
    t.is(typeof r.body.message, 'string');
  }
  t.is((await api('POST', path, { token: own, body: { host: 'elsewhere', port: 80 } })).status, 409, 'reported once, at the start');
  t.is((await serverRecord(hub.natsUrl, OUTSIDE))!.target, rec.target);
});

test.serial('slurm: a report naming a host other than the job\'s node fails the start with why, and the job is cancelled', async (t) => {
  t.is((await api('POST', `/users/${QUEUED}/servers/liar`, { token: ADMIN, body: { profile: 'liar' } })).status, 202);
  const stream = await readProgress(`${hub.url}/hub/api/users/${QUEUED}/servers/liar/progress`, ADMIN, 30_000);
  const last = stream.events.at(-1);
  t.true(last?.failed, JSON.stringify(stream.events));
  t.regex(last?.message ?? '', new RegExp(`elsewhere\\.invalid:\\d+, refused: elsewhere\\.invalid is not ${hostname()}, the node SLURM runs job \\d+ on`));
  const job = /job (\d+) on/.exec(last.message)![1];
  t.notRegex(squeue(job), /^(PENDING|RUNNING|COMPLETING)/);
  t.false((await serversOf(QUEUED)).liar?.ready ?? false);
});

test.serial('slurm: a job cancelled outside the hub shows the server stopped within the poll interval, with the reason in its progress stream and audited', async (t) => {
  const job = await jobOf(OUTSIDE);
  const t0 = Date.now();
  cluster.run('scancel', [job]);
  await waitFor('the server to stop in the hub', async () => (Object.keys(await serversOf(OUTSIDE)).length === 0 ? true : undefined), 10_000, 50);
  const took = Date.now() - t0;
  t.true(took < POLL_S * 1000 + 1500, `noticed after ${took} ms`);
  const audit = await waitFor('the audit event', async () =>
    (await auditTrail(hub.natsUrl)).find((e) => e.type === 'server.stop' && e.what === OUTSIDE), 5000);
  t.regex(audit.reason ?? (audit.details?.reason as string | undefined) ?? '', new RegExp(`SLURM job ${job} was cancelled`));
  t.regex(await endedEvent(t, OUTSIDE), new RegExp(`^Your server stopped: SLURM job ${job} was cancelled`));
});

test.serial('slurm: a spawner restart adopts running jobs, and a start still queued reports to the new spawner', async (t) => {
  t.is((await api('POST', `/users/${KEEPER}/server`, { token: ADMIN })).status, 202);
  await waitFor('ready', async () => ((await serversOf(KEEPER))['']?.ready ? true : undefined), 30_000, 100);
  t.is((await api('POST', `/users/${LATE}/server`, { token: ADMIN, body: { profile: 'held' } })).status, 202);
  const lateJob = await waitFor('the held job', async () => (await serverRecord(hub.natsUrl, LATE))?.spawner_state?.job_id as string | undefined, 20_000);
  const keeper = (await serverRecord(hub.natsUrl, KEEPER))!;
  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGKILL');
  await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 10_000);
  await waitFor('keeper re-adopted', async () => ((await serverRecord(hub.natsUrl, KEEPER))?.instance !== keeper.instance ? true : undefined), 20_000);
  t.true((await serversOf(KEEPER))[''].ready);
  t.is((await fetch(`${hub.url}/user/${KEEPER}/`)).status, 200);
  t.regex(squeue(String(keeper.spawner_state.job_id)), /^RUNNING\|/);

  cluster.run('scontrol', ['release', lateJob]);
  await waitFor('the queued start to finish under the new spawner', async () => ((await serversOf(LATE))['']?.ready ? true : undefined), 30_000, 100);
  t.is((await fetch(`${hub.url}/user/${LATE}/`)).status, 200);

  // the adopted job is watched: its end is noticed
  cluster.run('scancel', [String(keeper.spawner_state.job_id)]);
  await waitFor('the adopted job\'s end', async () => (Object.keys(await serversOf(KEEPER)).length === 0 ? true : undefined), 10_000, 100);
  for (const u of [LATE]) t.is((await api('DELETE', `/users/${u}/server`, { token: ADMIN })).status, 204);
});

test.serial('slurm: hub restart of the spawner while a queued start waits for its report: the new spawner takes the report and the old one, which began the start, finishes it', async (t) => {
  t.is((await api('POST', `/users/${RELAYED}/server`, { token: ADMIN, body: { profile: 'held' } })).status, 202);
  const job = await waitFor('the held job', async () => (await serverRecord(hub.natsUrl, RELAYED))?.spawner_state?.job_id as string | undefined, 20_000);
  const begun = (await serverRecord(hub.natsUrl, RELAYED))!;
  const old = hub.children().spawner!;
  const r = await runHubCommand(['restart', 'spawner', '--config', join(hub.dataDir, 'hub.json')], { env: { HUB_NATS_TOKEN: NATS_TOKEN }, killAfterMs: 60_000 });
  t.is(r.code, 0, `${r.stdout}${r.stderr}`);
  t.true(isAlive(old), 'the old spawner waits for the start it began (Supervisor.drain_timeout)');
  // the job runs and reports to the hub, whose socket is the new spawner's now
  cluster.run('scontrol', ['release', job]);
  await waitFor('the start to finish', async () => ((await serversOf(RELAYED))['']?.ready ? true : undefined), 30_000, 100);
  const done = (await serverRecord(hub.natsUrl, RELAYED))!;
  t.is(done.instance, begun.instance, 'made ready by the old spawner (not adopted by the new one after the drain)');
  t.is(String(done.spawner_state.job_id), job, 'the job the start began, not another');
  t.is((await fetch(`${hub.url}/user/${RELAYED}/`)).status, 200);
  await waitFor('the old spawner to leave once its start is done', async () => (isAlive(old) ? undefined : true), 20_000);
  t.true([202, 204].includes((await api('DELETE', `/users/${RELAYED}/server`, { token: ADMIN })).status));
});

test.serial('slurm: a job over its time limit stops the server, with the reason in its progress stream and audited', async (t) => {
  const { job } = await limited;
  t.true((await serversOf(LIMITED))['']?.ready ?? false, 'still running before its minute is up');
  await waitFor('the time limit', async () => (Object.keys(await serversOf(LIMITED)).length === 0 ? true : undefined), 120_000, 250);
  t.regex(squeue(job), /^TIMEOUT\|/);
  const audit = await waitFor('the audit event', async () =>
    (await auditTrail(hub.natsUrl)).find((e) => e.type === 'server.stop' && e.what === LIMITED), 5000);
  t.regex(audit.reason ?? (audit.details?.reason as string | undefined) ?? '', new RegExp(`SLURM job ${job} reached its time limit of 00:01:00`));
  t.is(await endedEvent(t, LIMITED), `Your server stopped: SLURM job ${job} reached its time limit of 00:01:00`);
});
