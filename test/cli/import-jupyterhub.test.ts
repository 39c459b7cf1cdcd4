// `hub import jupyterhub`: the real established hub 6.1.1 (the test venv .cache/jupyter-6.1, its own SQLite) is given
// users, groups with properties, roles (its load_roles: configuration there as here), API tokens of people and of a
// service, named servers with user options, shares, a share code, auth state and two services' OAuth clients (one
// configured, one made through its API), through its own REST API and login page; it is stopped, its database imported, this hub started on the result, and the very same token strings
// asked the same questions of both. Answers are compared field by field; what differs by design is listed in
// BY_DESIGN below. Also: --dry-run changes nothing, a second import duplicates nothing, an unknown schema revision
// is refused naming it, a running hub is refused, and an import killed after its commit point is finished by the
// next start.
import test, { type ExecutionContext } from 'ava';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import sqlite3 from 'sqlite3';
import { spawn } from 'node:child_process';
import { REPO, SUPERVISOR, freePort, runHubCommand, startHub } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { startJupyterHub } from '../bench/jupyterhub.js';
import { hashSecret } from '../../shared/secrets.js';
import { makeJupyterhubDb, makeJupyterhubSchema } from './jupyterhub-fixture.js';
import { startPostgres } from '../postgres.js';
import { Browser, hiddenField, paramsOf } from '../oauth/browser.js';

const VENV_PYTHON = join(REPO, '.cache', 'jupyter-6.1', 'bin', 'python');
const ADMIN_TOKEN = randomToken();
const SERVICE_TOKEN = randomToken();
/** the api_tokens of two OAuth-client services there (one in its config, one made through its API): their client secrets */
const DASH_TOKEN = randomToken();
const LATE_TOKEN = randomToken();
const DASH_CB = 'http://127.0.0.1:9/dash/callback';
const LATE_CB = 'http://127.0.0.1:9/late/callback';
const JH_CRYPT_KEY = randomBytes(32).toString('hex');
/** the established hub also takes its key as 44 characters of base64 (the PostgreSQL run uses that form) */
const JH_CRYPT_KEY_BASE64 = randomBytes(32).toString('base64');
const OUR_CRYPT_KEY = randomBytes(32).toString('hex');

/**
 * What this hub answers differently from the established hub on purpose; `normalise` takes each out, and nothing
 * else, before the answers are compared.
 */
const BY_DESIGN = {
  timestamps: 'the established hub keeps microseconds, this hub milliseconds: times are compared to the millisecond',
  scopeOrder: "a token's scopes are a set there (Python's order), sorted here: compared sorted",
  errorCode: 'error bodies here also carry a stable `code` (shared/errors.ts)',
  groupRoles: "a user model's roles here also name the roles held through a group (team-reader for alice); the established hub names only roles given to the user",
  memberOrder: "a group's users are listed here in user-id order (paged by id), there in the order they were added: compared sorted",
  hubClient: "the hub's own OAuth client is named \"Hub\" here, \"JupyterHub\" there",
  noOptions: 'a named server started without options has user_options {} here, null there',
  laterActivity: "a token's use shows in last_activity here within a second; there a use less than activity_resolution (30 s) after the recorded one is not recorded: where this hub's last_activity is later (a question's own use), it is compared as the established hub's",
  tokenOrder: "a person's tokens are listed here by last activity, there in storage order (PostgreSQL's changes with each update): compared in id order",
};

/**
 * Where this hub's models still differ from the established hub 6.1's, not because of the import (its server model
 * and page size): reported, and left to the API's owners.
 */
const KNOWN_GAPS = {
  fullUrls: 'server models here have no full_url / full_progress_url (null there without public_url)',
  defaultServer: '?include_stopped_servers lists the never-started default server ("") there, not here',
  pageLimit: '_pagination.limit of shares and share codes is 50 here, 200 there',
};

/** team-reader is given to carol and to the group team (load_roles below) */
const DIRECT_ROLE_USERS: Record<string, string[]> = { 'team-reader': ['carol'] };

/** An answer with what BY_DESIGN and KNOWN_GAPS name taken out. */
function normalise(value: unknown, key = '', parent: Record<string, unknown> | null = null): unknown {
  if (typeof value === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/.test(value)) return new Date(value).toISOString(); // timestamps
  if (key === 'oauth_client' && value === 'JupyterHub') return 'Hub'; // hubClient
  if (key === 'user_options' && value === null) return {}; // noOptions
  if (Array.isArray(value)) {
    let items = value.map((v) => normalise(v));
    if (key === 'scopes' || (key === 'users' && parent?.kind === 'group')) items = items.sort(); // scopeOrder, memberOrder
    if (key === 'api_tokens') items = items.sort((a, b) => String((a as { id: string }).id).localeCompare(String((b as { id: string }).id))); // tokenOrder
    if (key === 'roles' && parent?.kind === 'user') {
      items = items.filter((r) => !(typeof r === 'string' && DIRECT_ROLE_USERS[r] && !DIRECT_ROLE_USERS[r].includes(String(parent.name)))); // groupRoles
    }
    return items;
  }
  if (value && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(o)) {
      if (k === 'code' && typeof o.status === 'number' && o.status >= 400) continue; // errorCode
      if (k === 'full_url' || k === 'full_progress_url') continue; // fullUrls
      if (k === 'limit' && key === '_pagination') continue; // pageLimit
      if (key === 'servers' && k === '' && (v as { stopped?: boolean })?.stopped) continue; // defaultServer
      out[k] = normalise(v, k, o);
    }
    return out;
  }
  return value;
}

/**
 * This hub's answer (normalised) with every last_activity from the questions' own uses (at or after `askedFrom`, an
 * ISO time) that is later than the established hub's at the same place set to the established hub's
 * (laterActivity); any other difference, such as an import that moved an activity, stays and differs.
 */
function withoutLaterActivity(ours: unknown, established: unknown, askedFrom: string): unknown {
  if (Array.isArray(ours) && Array.isArray(established)) return ours.map((v, i) => withoutLaterActivity(v, established[i], askedFrom));
  if (!ours || typeof ours !== 'object' || !established || typeof established !== 'object' || Array.isArray(established)) return ours;
  const theirs = established as Record<string, unknown>;
  return Object.fromEntries(Object.entries(ours).map(([k, v]) => {
    const there = theirs[k];
    if (k === 'last_activity' && typeof v === 'string' && typeof there === 'string' && v > there && v >= askedFrom) return [k, there];
    return [k, withoutLaterActivity(v, there, askedFrom)];
  }));
}

/** A config of the established hub: a spawner that starts nothing of its own (its "server" is the test's HTTP listener). */
function jupyterhubConfig(serverPort: number): string[] {
  return [
    'from jupyterhub.spawner import Spawner',
    'from jupyterhub.auth import DummyAuthenticator',
    'class ListenerSpawner(Spawner):',
    '    running = False',
    '    async def start(self):',
    '        self.running = True',
    `        return ('127.0.0.1', ${serverPort})`,
    '    async def poll(self):',
    '        return None if self.running else 0',
    '    async def stop(self, now=False):',
    '        self.running = False',
    'class StateAuthenticator(DummyAuthenticator):',
    '    async def authenticate(self, handler, data):',
    "        return {'name': data['username'], 'auth_state': {'access_token': 'at-' + data['username'], 'claims': {'n': 7}}}",
    'c.JupyterHub.spawner_class = ListenerSpawner',
    'c.JupyterHub.authenticator_class = StateAuthenticator',
    'c.Authenticator.enable_auth_state = True',
    'c.Authenticator.allow_all = True',
    'c.JupyterHub.allow_named_servers = True',
    'c.JupyterHub.services = [',
    `    {'name': 'reporter', 'api_token': ${JSON.stringify(SERVICE_TOKEN)}},`,
    `    {'name': 'dash', 'api_token': ${JSON.stringify(DASH_TOKEN)}, 'oauth_client_id': 'service-dash-app', 'oauth_redirect_uri': ${JSON.stringify(DASH_CB)}, 'oauth_no_confirm': True},`,
    ']',
    'c.JupyterHub.load_roles = [',
    "    {'name': 'reporter-role', 'description': 'reads people', 'scopes': ['list:users', 'read:users', 'read:groups'], 'services': ['reporter']},",
    "    {'name': 'team-reader', 'scopes': ['read:groups!group=team'], 'groups': ['team'], 'users': ['carol']},",
    ']',
  ];
}

/** One request with node:http (fetch adds `Sec-Fetch-Mode: cors`, which a browser's page navigation does not send). */
function plainRequest(url: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}) {
  return new Promise<{ status: number; cookies: string[]; text: string }>((resolve, reject) => {
    const req = httpRequest(url, { method: init.method ?? 'GET', headers: init.headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, cookies: (res.headers['set-cookie'] ?? []).map((c) => c.split(';')[0]), text }));
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error(`${url}: no answer in 15 s`)));
    req.end(init.body);
  });
}

/**
 * A person's login on the established hub's own form (so its authenticator stores auth state), as a browser does it:
 * it sets its _xsrf cookie only on a page navigation, and without the cookie it makes a token afresh at the POST.
 */
async function loginOnJupyterhub(url: string, name: string): Promise<void> {
  const page = await plainRequest(`${url}/hub/login`);
  const xsrf = /name="_xsrf" value="([^"]+)"/.exec(page.text)?.[1];
  if (!xsrf || !page.cookies.some((c) => c.startsWith('_xsrf='))) throw new Error(`the established hub's login page: ${page.status}, no _xsrf form field or cookie`);
  const r = await plainRequest(`${url}/hub/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: page.cookies.join('; ') },
    body: new URLSearchParams({ username: name, password: 'anything', _xsrf: xsrf }).toString(),
  });
  if (r.status !== 302) throw new Error(`login as ${name} on the established hub: ${r.status} ${r.text.match(/<h1>([^<]*)/)?.[1]}`);
}

async function must(call: ApiCall, method: string, path: string, opts: Parameters<ApiCall>[2], ...ok: number[]) {
  const r = await call(method, path, opts);
  if (!ok.includes(r.status)) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

interface Question { who: string; token: string; path: string }

/** Everything the established hub is made to hold, through its REST API; returns the tokens and questions to ask. */
async function populate(jh: ApiCall, url: string) {
  const admin = { token: ADMIN_TOKEN };
  await must(jh, 'POST', '/users', { ...admin, body: { usernames: ['alice', 'bob', 'carol'] } }, 201);
  await must(jh, 'PATCH', '/users/bob', { ...admin, body: { admin: true } }, 200);
  // the group exists already: its role (load_roles) names it, and the established hub makes it at start
  await must(jh, 'POST', '/groups/team/users', { ...admin, body: { users: ['alice', 'carol'] } }, 200);
  await must(jh, 'PUT', '/groups/team/properties', { ...admin, body: { course: 'intro', seats: 30 } }, 200);
  await must(jh, 'POST', '/groups/guests', { ...admin, body: { users: ['bob'] } }, 201);
  await must(jh, 'POST', '/users/alice/activity', { ...admin, body: { last_activity: '2026-11-20T10:00:00.123456Z' } }, 200);
  const aliceScoped = (await must(jh, 'POST', '/users/alice/tokens', { ...admin, body: { note: 'read my things', scopes: ['read:users!user=alice', 'read:servers!user=alice', 'read:shares!user=alice'], expires_in: 86_400 } }, 201)).token as string;
  const alice = (await must(jh, 'POST', '/users/alice/tokens', { ...admin, body: { note: 'all of alice' } }, 201)).token as string;
  const carol = (await must(jh, 'POST', '/users/carol/tokens', { ...admin, body: {} }, 201)).token as string;
  await must(jh, 'POST', '/users/alice/servers/lab', { ...admin, body: { image: 'python', size: 2 } }, 201, 202);
  await must(jh, 'DELETE', '/users/alice/servers/lab', admin, 202, 204);
  await must(jh, 'POST', '/users/alice/servers/notes', admin, 201, 202);
  await must(jh, 'DELETE', '/users/alice/servers/notes', admin, 202, 204);
  await must(jh, 'POST', '/shares/alice/lab', { ...admin, body: { user: 'carol', scopes: ['access:servers!server=alice/lab', 'read:servers!server=alice/lab'] } }, 200);
  await must(jh, 'POST', '/shares/alice/lab', { ...admin, body: { group: 'guests' } }, 200);
  const code = (await must(jh, 'POST', '/share-codes/alice/notes', { ...admin, body: { expires_in: 3600 } }, 200)).code as string;
  // a service made at run time, an OAuth client with the default client id: a configured service here after the import
  await must(jh, 'POST', '/services/late', { ...admin, body: { api_token: LATE_TOKEN, oauth_redirect_uri: LATE_CB, oauth_no_confirm: true } }, 201);
  await loginOnJupyterhub(url, 'carol');
  const questions: Question[] = [];
  const ask = (who: string, token: string, ...paths: string[]) => { for (const path of paths) questions.push({ who, token, path }); };
  ask('admin', ADMIN_TOKEN, '/users/alice', '/users/bob', '/users/carol', '/users/alice?include_stopped_servers', '/groups/team', '/groups/guests',
    '/users/alice/tokens', '/shares/alice/lab', '/shares/alice/notes', '/users/carol/shared', '/groups/guests/shared', '/share-codes/alice/notes', '/users/carol');
  ask('alice (scoped token)', aliceScoped, '/user', '/users/alice', '/users/bob');
  ask('alice', alice, '/user', '/users/alice/tokens', '/users/alice/servers/lab');
  ask('carol', carol, '/user', '/users/carol/shared', '/groups/team');
  ask('reporter (service)', SERVICE_TOKEN, '/user', '/users/alice', '/groups/team', '/users?sort=name');
  return { questions, code };
}

async function answers(call: ApiCall, questions: Question[]) {
  const out: { status: number; body: unknown }[] = [];
  for (const q of questions) {
    const r = await call('GET', q.path, { token: q.token });
    out.push({ status: r.status, body: r.body });
  }
  return out;
}

let listener: Server;
let serverPort = 0;
test.before(async () => {
  if (!existsSync(VENV_PYTHON)) throw new Error(`${VENV_PYTHON} is missing: run \`node scripts/setup.mjs --for-tests\` (it installs jupyterhub 6.1.1 there)`);
  listener = createServer((_req, res) => res.end('a server of the established hub\n'));
  await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
  serverPort = (listener.address() as { port: number }).port;
});
test.after.always(() => listener?.close());

/** The established hub on `dbUrl` (its own SQLite file when none), populated, stopped, imported from `importDb`, compared. */
async function sameAnswers(t: ExecutionContext, { dbUrl, importDb, cryptKey }: { dbUrl?: string; importDb?: string; cryptKey: string }) {
  const jh = await startJupyterHub({
    python: VENV_PYTHON, apiTokens: { [ADMIN_TOKEN]: 'admin' }, adminUsers: ['admin'], extraConfig: jupyterhubConfig(serverPort),
    env: { JUPYTERHUB_CRYPT_KEY: cryptKey }, dbUrl,
  });
  let before: { status: number; body: unknown }[];
  let questions: Question[];
  let code: string;
  try {
    const call = apiClient(jh.url);
    ({ questions, code } = await populate(call, jh.url));
    // once to settle: asking moves activity (each token's and user's), which the second round then reads as it stays
    await answers(call, questions);
    before = await answers(call, questions);
  } finally {
    await jh.stop({ keepDir: true });
  }
  const dbFile = importDb ?? join(jh.dir, 'jupyterhub.sqlite');
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-import-'));
  try {
    // without the established hub's key its auth state stays behind, and the command says so
    const noKey = await runHubCommand(['import', 'jupyterhub', '--db', dbFile, `--Hub.data_dir=${dataDir}`, '--dry-run'], { env: { JUPYTERHUB_CRYPT_KEY: '', HUB_CRYPT_KEY: OUR_CRYPT_KEY } });
    t.regex(noKey.stdout, /^note: auth state of 1 user not brought over: JUPYTERHUB_CRYPT_KEY is not set/m);
    const env = { JUPYTERHUB_CRYPT_KEY: cryptKey, HUB_CRYPT_KEY: OUR_CRYPT_KEY };
    const r = await runHubCommand(['import', 'jupyterhub', '--db', dbFile, `--Hub.data_dir=${dataDir}`], { env });
    t.notRegex(r.stdout, /auth state .* not brought over/);
    t.is(r.code, 0, r.stderr + r.stdout);
    t.log(r.stdout);
    process.env.HUB_CRYPT_KEY = OUR_CRYPT_KEY;
    const hub = await startHub({ reuse: { dataDir, port: await freePort(), natsPort: await freePort() }, config: { Hub: { authenticator_class: 'dummy', allow_named_servers: true }, Authenticator: { enable_auth_state: true } } });
    try {
      const askedFrom = new Date().toISOString();
      const after = await answers(apiClient(hub.url), questions);
      const ours = (i: number) => withoutLaterActivity(normalise(after[i]), normalise(before[i]), askedFrom);
      const differ = questions.filter((_q, i) => !isDeepStrictEqual(ours(i), normalise(before[i])));
      for (const q of differ) {
        const i = questions.indexOf(q);
        t.log(`${q.who}: GET ${q.path}\n  ours: ${JSON.stringify(ours(i))}\n  established: ${JSON.stringify(normalise(before[i]))}`);
      }
      t.deepEqual(differ.map((q) => `${q.who}: GET ${q.path}`), []);
      // the comparison is about something: every question answered, auth state opened, options carried
      t.deepEqual(before.map((a) => a.status).filter((s) => s !== 200), [404]);
      const of = (who: string, path: string) => after[questions.findIndex((q) => q.who === who && q.path === path)].body as any;
      t.is(of('admin', '/users/carol').auth_state.access_token, 'at-carol');
      t.deepEqual(of('alice', '/users/alice/servers/lab').user_options, { image: 'python', size: 2 });
      t.is(of('reporter (service)', '/user').kind, 'service');
      // the share code alice handed out on the established hub is accepted here (its stored hash matched)
      const bob = new Browser(hub.url);
      t.is((await bob.login('bob', 'anything')).status, 302);
      const page = await bob.get(`/hub/accept-share?code=${encodeURIComponent(code)}`);
      t.is(page.status, 200, page.body.slice(0, 300));
      const accepted = await bob.post('/hub/accept-share', { _xsrf: hiddenField(page.body, '_xsrf'), code: hiddenField(page.body, 'code') });
      t.is(accepted.status, 302);
      const shared = await apiClient(hub.url)('GET', '/users/bob/shared', { token: ADMIN_TOKEN });
      const toBob = shared.body.items.filter((s: { kind: string }) => s.kind === 'user');
      t.deepEqual(toBob.map((s: { server: { user: { name: string }; name: string }; scopes: string[] }) => [s.server.user.name, s.server.name, s.scopes]),
        [['alice', 'notes', ['access:servers!server=alice/notes']]]);
      // the services' OAuth clients: the same client id and secret (their api_token, in no file here) sign bob in
      t.false(readFileSync(join(dataDir, 'imported', 'jupyterhub-config.json'), 'utf8').includes(DASH_TOKEN), 'no secret in the imported config');
      for (const [clientId, secret, callback] of [['service-dash-app', DASH_TOKEN, DASH_CB], ['service-late', LATE_TOKEN, LATE_CB]]) {
        const authorize = `/hub/api/oauth2/authorize?${new URLSearchParams({ client_id: clientId, response_type: 'code', redirect_uri: callback, state: 's1' })}`;
        const codeFor = async () => {
          const r = await bob.get(authorize);
          if (r.status !== 302 || !r.location?.startsWith(`${callback}?`)) throw new Error(`${clientId} authorize: ${r.status} ${r.location} ${r.body.slice(0, 300)}`);
          return paramsOf(r.location).get('code')!;
        };
        const redeem = async (code: string, clientSecret: string) => {
          const r = await fetch(`${hub.url}/hub/api/oauth2/token`, {
            method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
            body: new URLSearchParams({ grant_type: 'authorization_code', code, client_id: clientId, client_secret: clientSecret, redirect_uri: callback }).toString(),
          });
          return { status: r.status, body: await r.json() };
        };
        const wrong = await redeem(await codeFor(), `${secret}x`);
        t.deepEqual([wrong.status, wrong.body.error], [401, 'invalid_client'], clientId);
        const granted = await redeem(await codeFor(), secret);
        t.is(granted.status, 200, `${clientId}: ${JSON.stringify(granted.body)}`);
        const me = await apiClient(hub.url)('GET', '/user', { token: granted.body.access_token });
        t.deepEqual([me.status, me.body.name], [200, 'bob'], clientId);
      }
    } finally {
      await hub.stop({ keepDataDir: true });
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(jh.dir, { recursive: true, force: true });
  }
}

test.serial('import: the same token strings get the same answers from this hub as from the established hub 6.1.1 (SQLite)', (t) => sameAnswers(t, { cryptKey: JH_CRYPT_KEY }));

test.serial('import: the same token strings get the same answers from this hub as from the established hub 6.1.1 (PostgreSQL)', async (t) => {
  const pg = await startPostgres();
  try {
    await pg.createDatabase('jupyterhub');
    // the established hub names its driver (psycopg2); the import takes either spelling
    await sameAnswers(t, { dbUrl: pg.url('jupyterhub').replace('postgresql://', 'postgresql+psycopg2://'), importDb: pg.url('jupyterhub'), cryptKey: JH_CRYPT_KEY_BASE64 });
  } finally {
    await pg.stop();
  }
});

/** `work` in a temp dir of its own, removed after. */
async function inTempDir(work: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'hub-import-'));
  try {
    await work(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `hub import jupyterhub` on `db` into `dataDir`, to its end. */
const importInto = (db: string, dataDir: string, ...more: string[]) =>
  runHubCommand(['import', 'jupyterhub', '--db', db, `--Hub.data_dir=${dataDir}`, ...more]);

/** "  users: 50 (0 new, 50 already here, updated)" → {total: 50, here: 50} */
function counted(stdout: string, label: string): { total: number; here: number } {
  const m = new RegExp(`^  ${label}: (\\d+)(?: \\((\\d+) new, (\\d+) already here)?`, 'm').exec(stdout);
  if (!m) throw new Error(`no "${label}" line in:\n${stdout}`);
  return { total: Number(m[1]), here: Number(m[3] ?? 0) };
}

const withSqlite = async (path: string, sql: string) => {
  const db = await new Promise<sqlite3.Database>((ok, fail) => { const d = new sqlite3.Database(path, (e) => (e ? fail(e) : ok(d))); });
  await new Promise<void>((ok, fail) => db.exec(sql, (e) => (e ? fail(e) : ok())));
  await new Promise<void>((ok) => db.close(() => ok()));
};

test.serial('import: --dry-run changes nothing; a second run updates what changed and duplicates nothing', async (t) => {
  await inTempDir(async (dir) => {
    const db = join(dir, 'jupyterhub.sqlite');
    const fixture = await makeJupyterhubDb(db, { users: 50, tokensPerUser: 2 });
    const dataDir = join(dir, 'hub');
    const dry = await importInto(db, dataDir, '--dry-run');
    t.is(dry.code, 0, dry.stderr);
    t.regex(dry.stdout, /^would import from /);
    t.deepEqual(counted(dry.stdout, 'users'), { total: 50, here: 0 });
    t.false(existsSync(join(dataDir, 'auth.sqlite')), 'a dry run writes no store');
    t.false(existsSync(join(dataDir, 'imported', 'jupyterhub-config.json')));

    const first = await importInto(db, dataDir);
    t.is(first.code, 0, first.stderr);
    t.deepEqual(counted(first.stdout, 'API tokens'), { total: 100, here: 0 });
    t.deepEqual(counted(first.stdout, 'named servers \\(stopped\\)'), { total: 5, here: 0 });
    // the established hub changes on: user-1 made an admin, one more token
    const extra = randomToken();
    await withSqlite(db, `UPDATE users SET admin = 1 WHERE name = 'user-1';
      INSERT INTO api_tokens (user_id, prefix, hashed, note, scopes, created, client_id)
      VALUES (2, '${extra.slice(0, 4)}', '${hashSecret(extra, 1)}', 'late', '["read:users!user=user-1"]', '2026-11-02 10:00:00.000001', 'jupyterhub');`);
    const again = await importInto(db, dataDir);
    t.is(again.code, 0, again.stderr);
    t.deepEqual(counted(again.stdout, 'users'), { total: 50, here: 50 });
    t.deepEqual(counted(again.stdout, 'API tokens'), { total: 101, here: 100 });

    // what a person sees: 50 users once each, user-1 an admin, each token working, user-1's three
    const hub = await startHub({ reuse: { dataDir, port: await freePort(), natsPort: await freePort() }, config: { Hub: { authenticator_class: 'dummy', allow_named_servers: true } } });
    try {
      const call = apiClient(hub.url);
      const admin = fixture.sample.get('user-0')!;
      const users = await call('GET', '/users?limit=200', { token: admin });
      t.is(users.status, 200);
      t.is(users.body.length, 50);
      t.is(new Set(users.body.map((u: { name: string }) => u.name)).size, 50);
      t.true(users.body.find((u: { name: string }) => u.name === 'user-1').admin);
      const late = await call('GET', '/user', { token: extra });
      t.is(late.status, 200);
      t.is(late.body.name, 'user-1');
      t.true(late.body.scopes.includes('read:users!user=user-1'));
      t.false(late.body.scopes.includes('tokens!user=user-1'));
      const tokens = await call('GET', '/users/user-1/tokens', { token: admin });
      t.is(tokens.body.api_tokens.length, 3);
      const lab = await call('GET', '/users/user-10/servers/lab', { token: admin });
      t.deepEqual([lab.status, lab.body.stopped, lab.body.user_options], [200, true, { image: 'python-3' }]);
    } finally {
      await hub.stop({ keepDataDir: true });
    }
  });
});

test.serial('import: an unknown schema revision is refused naming it; a database that is not the established hub\'s too', async (t) => {
  await inTempDir(async (dir) => {
    const db = join(dir, 'jupyterhub.sqlite');
    makeJupyterhubSchema(`sqlite:///${db}`);
    await withSqlite(db, "UPDATE alembic_version SET version_num = 'deadbeef0042'");
    const r = await importInto(db, join(dir, 'hub'));
    t.is(r.code, 1);
    t.regex(r.stderr, /unknown schema revision "deadbeef0042"/);
    t.false(existsSync(join(dir, 'hub', 'auth.sqlite')));
    const other = join(dir, 'other.sqlite');
    await withSqlite(other, 'CREATE TABLE things (id INTEGER)');
    const r2 = await importInto(other, join(dir, 'hub'));
    t.is(r2.code, 1);
    t.regex(r2.stderr, /not a database of the established hub/);
    const missing = await importInto(join(dir, 'nowhere.sqlite'), join(dir, 'hub'));
    t.is(missing.code, 1);
    t.regex(missing.stderr, /no such file/);
  });
});

test.serial('import: refused while a hub runs on the data dir (stop it first)', async (t) => {
  await inTempDir(async (dir) => {
    const db = join(dir, 'jupyterhub.sqlite');
    await makeJupyterhubDb(db, { users: 3, tokensPerUser: 1 });
    const hub = await startHub();
    try {
      const r = await importInto(db, hub.dataDir);
      t.is(r.code, 1);
      t.regex(r.stderr, /a hub is running on .*stop it first/);
      t.false(existsSync(join(hub.dataDir, 'imported', 'jupyterhub-config.json')), 'nothing written under it');
    } finally {
      await hub.stop();
    }
  });
});

test.serial('import: killed at any point, it leaves all of the import or none of it (users and tokens together)', async (t) => {
  await inTempDir(async (dir) => {
    const db = join(dir, 'jupyterhub.sqlite');
    await makeJupyterhubDb(db, { users: 5000, tokensPerUser: 2 });
    // how long a whole import takes here, to spread the kills over it
    const t0 = Date.now();
    const whole = await importInto(db, join(dir, 'whole'));
    t.is(whole.code, 0, whole.stderr);
    const took = Date.now() - t0;
    const outcomes: string[] = [];
    for (const fraction of [0.3, 0.6, 0.8, 0.9, 0.97]) {
      const dataDir = join(dir, `killed-${fraction}`);
      const p = spawn(process.execPath, [SUPERVISOR, 'import', 'jupyterhub', '--db', db, `--Hub.data_dir=${dataDir}`], { stdio: 'ignore' });
      const exited = new Promise((r) => p.on('exit', r));
      const timer = setTimeout(() => p.kill('SIGKILL'), Math.round(took * fraction));
      await exited;
      clearTimeout(timer);
      // the next command finishes an import killed after its commit point; a dry run then says what is there
      const look = await importInto(db, dataDir, '--dry-run');
      t.is(look.code, 0, look.stderr);
      const users = counted(look.stdout, 'users').here;
      const tokens = counted(look.stdout, 'API tokens').here;
      t.true((users === 0 && tokens === 0) || (users === 5000 && tokens === 10_000), `killed at ${fraction}: ${users} users and ${tokens} tokens there`);
      outcomes.push(users ? 'all' : 'none');
      t.false(existsSync(join(dataDir, 'imported', 'staging')), 'no copies left behind');
    }
    t.log(`killed at 30 … 97 % of ${took} ms: ${outcomes.join(', ')}`);
  });
});
