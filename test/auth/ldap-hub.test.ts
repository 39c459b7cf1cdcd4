// The "ldap" authenticator through whole hubs, against a real slapd (./slapd.ts): what a person sees at the login
// page and through the API, and what an operator sees in the audit trail and the logs. Two hubs on one directory:
//  - "template": bind_dn_template, straight to slapd; allowed_groups and admin_groups (groupOfNames),
//    manage_groups with group_search_base, enable_auth_state with auth_state_attributes; at the end slapd is
//    stopped under it (a directory that is down);
//  - "lookup": lookup_dn with a search account and allow_all, reaching slapd through a relay of this file that can
//    be switched to accept connections and never answer (a hung directory), and a valid_username_regex that lets
//    any name through, so that names built to break filters do reach the directory.
// Hub.rpc_timeout is 2 s on both: a directory that does not answer is an outage page within it.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { auditTrail, type AuditEvent } from '../spawner/helpers.js';
import { Browser, formLogin, whoami, type Page } from './helpers.js';
import { startSlapd, type Slapd } from './slapd.js';

const pw = (who: string) => `${who}-${randomBytes(9).toString('base64url')}`;
const PW = {
  alice: pw('alice'), bob: pw('bob'), carol: pw('carol'), dave: pw('dave'), erin: pw('erin'), frank: pw('frank'), searcher: pw('searcher'),
};
/** every password the directory holds or the form was given: none may reach a log or an audit event */
const TYPED = new Set(Object.values(PW));
const wrongPassword = () => {
  const p = pw('wrong');
  TYPED.add(p);
  return p;
};

const ADMIN = randomToken();
const LIMIT = 3;
const RPC_TIMEOUT_S = 2;
const MSG = {
  invalid: 'Wrong name or password.',
  notInGroup: 'Your account is not in a group allowed to use this hub.',
  unavailable: 'The sign-in service is not answering right now. Please try again in a minute.',
};

let dir: Slapd;
let template: HubUnderTest;
let lookup: HubUnderTest;
const output = new Map<HubUnderTest, string>();

/** The relay in front of slapd for the lookup hub: 'pass' forwards, 'hang' accepts and never says a word. */
let relay: Server;
let relayMode: 'pass' | 'hang' = 'pass';
const relaySockets = new Set<Socket>();
const hung = new Set<Socket>();

let browsers = 0;
/** a browser with a client address of its own (127.0.x.y), so lockouts per address never cross attempts */
const browser = () => {
  const n = browsers++;
  return new Browser(`127.0.${1 + Math.floor(n / 250)}.${2 + (n % 250)}`);
};

test.before(async () => {
  dir = await startSlapd({
    searchUser: { name: 'searcher', password: PW.searcher },
    people: [
      { uid: 'alice', password: PW.alice, mail: 'alice@hub.test', attributes: { displayName: 'Alice Liddell', telephoneNumber: ['+1 555 0100', '+1 555 0101'] } },
      { uid: 'bob', password: PW.bob, mail: 'bob@hub.test' },
      { uid: 'carol', password: PW.carol },
      { uid: 'dave', password: PW.dave },
      { uid: 'erin', password: PW.erin },
      { uid: 'frank', password: PW.frank },
    ],
    groups: [
      { cn: 'scientists', kind: 'groupOfNames', members: ['alice', 'bob', 'dave', 'erin', 'frank'] },
      { cn: 'admins', kind: 'groupOfNames', members: ['alice'] },
      { cn: 'red-team', kind: 'groupOfNames', ou: 'teams', members: ['alice'] },
      { cn: 'blue-team', kind: 'posixGroup', ou: 'teams', members: ['alice', 'bob'] },
    ],
  });
  relay = createServer((client) => {
    relaySockets.add(client);
    client.on('close', () => { relaySockets.delete(client); hung.delete(client); });
    client.on('error', () => {});
    if (relayMode === 'hang') {
      hung.add(client);
      return;
    }
    const upstream = connect(dir.port, dir.host);
    relaySockets.add(upstream);
    upstream.on('close', () => { relaySockets.delete(upstream); client.destroy(); });
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const relayPort = (relay.address() as { port: number }).port;

  process.env.HUB_CRYPT_KEY = randomBytes(32).toString('hex'); // each test file is a process of its own
  const common = {
    Hub: { api_tokens: { [ADMIN]: 'boss' }, authenticator_class: 'ldap', rpc_timeout: RPC_TIMEOUT_S, log_level: 'debug' },
    PasswordAuthenticator: { failed_login_limit: LIMIT, lockout_seconds: 300 },
  };
  [template, lookup] = await Promise.all([
    startHub({
      config: {
        ...common,
        Authenticator: { admin_users: ['boss'], manage_groups: true, enable_auth_state: true },
        LDAPAuthenticator: {
          server_address: dir.host, server_port: dir.port, tls_strategy: 'insecure',
          bind_dn_template: [`uid={username},ou=people,${dir.base}`],
          allowed_groups: [dir.groupDn('scientists')], admin_groups: [dir.groupDn('admins')],
          group_search_base: dir.base,
          auth_state_attributes: ['mail', 'displayName', 'telephoneNumber'],
        },
      },
    }),
    startHub({
      config: {
        ...common,
        Authenticator: { admin_users: ['boss'], allow_all: true },
        LDAPAuthenticator: {
          server_address: '127.0.0.1', server_port: relayPort, tls_strategy: 'insecure',
          lookup_dn: true, user_search_base: dir.base, lookup_dn_search_user: dir.searchUserDn, lookup_dn_search_password: PW.searcher,
          valid_username_regex: '^.{1,64}$',
        },
      },
    }),
  ]);
  for (const hub of [template, lookup]) {
    output.set(hub, '');
    const keep = (chunk: Buffer) => { output.set(hub, output.get(hub) + chunk.toString()); };
    hub.proc.stdout!.on('data', keep);
    hub.proc.stderr!.on('data', keep);
  }
});

test.after.always(async () => {
  await Promise.all([template?.stop(), lookup?.stop()]);
  for (const s of relaySockets) s.destroy();
  relay?.close();
  await dir?.stop();
});

const api = (hub: HubUnderTest): ApiCall => apiClient(hub.url);

/** The message the login page shows, unescaped; null when it shows none. */
function loginError(page: Page): string | null {
  const m = /<p class="error" id="login-error">([^<]*)<\/p>/.exec(page.body);
  return m ? m[1].replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n))).replace(/&amp;/g, '&') : null;
}

const hasLoginCookie = (page: Page) => (page.headers['set-cookie'] ?? []).some((c) => c.startsWith('hub-hub-login='));

async function eventsAbout(hub: HubUnderTest, what: string, ready: (e: AuditEvent[]) => boolean): Promise<AuditEvent[]> {
  return waitFor(`the audit events about ${what}`, async () => {
    const e = (await auditTrail(hub.natsUrl)).filter((x) => x.what === what);
    return ready(e) ? e : undefined;
  }, 10_000, 200);
}

/** A form login, timed from the POST alone. */
async function timedLogin(b: Browser, hub: HubUnderTest, name: string, password: string): Promise<Page & { ms: number }> {
  const form = await b.get(`${hub.url}/hub/login`);
  const xsrf = /name="_xsrf"[^>]*value="([^"]*)"/.exec(form.body)?.[1] ?? '';
  const started = performance.now();
  const page = await b.post(`${hub.url}/hub/login`, { _xsrf: xsrf, next: '', username: name, password });
  return { ...page, ms: performance.now() - started };
}

test.serial('ldap hub: bind_dn_template — a person logs in through the form; whoami answers the name', async (t) => {
  const b = browser();
  const ok = await formLogin(b, template.url, 'bob', PW.bob);
  t.is(ok.status, 302, loginError(ok) ?? '');
  t.is(ok.location, `${template.url}/hub/home`);
  t.true(hasLoginCookie(ok));
  const me = await whoami(b, template.url);
  t.is(me.status, 200);
  t.like(me.body, { name: 'bob', admin: false });
  const success = await eventsAbout(template, 'bob', (e) => e.some((x) => x.type === 'login.success'));
  t.like(success.find((x) => x.type === 'login.success'), { who: 'user:bob', outcome: 'ok', details: { via: 'ldap' } });
});

test.serial('ldap hub: admin_groups makes an admin; manage_groups with group_search_base gives every group the person is in', async (t) => {
  const b = browser();
  t.is((await formLogin(b, template.url, 'alice', PW.alice)).status, 302);
  t.like((await whoami(b, template.url)).body, { name: 'alice', admin: true });
  const alice = await api(template)('GET', '/users/alice', { token: ADMIN });
  t.is(alice.body.admin, true);
  // groupOfNames under ou=groups and ou=teams, and a posixGroup (memberUid) under ou=teams
  t.deepEqual([...alice.body.groups].sort(), ['admins', 'blue-team', 'red-team', 'scientists']);
  const bob = await api(template)('GET', '/users/bob', { token: ADMIN });
  t.is(bob.body.admin, false);
  t.deepEqual([...bob.body.groups].sort(), ['blue-team', 'scientists']);
  const team = await api(template)('GET', '/groups/red-team', { token: ADMIN });
  t.is(team.status, 200);
  t.deepEqual(team.body.users, ['alice']);
});

test.serial('ldap hub: enable_auth_state keeps auth_state_attributes; an admin sees them as auth_state.user_attributes', async (t) => {
  t.is((await formLogin(browser(), template.url, 'alice', PW.alice)).status, 302);
  const alice = await api(template)('GET', '/users/alice', { token: ADMIN });
  t.is(alice.status, 200);
  t.deepEqual(alice.body.auth_state, {
    user_attributes: { mail: 'alice@hub.test', displayName: 'Alice Liddell', telephoneNumber: ['+1 555 0100', '+1 555 0101'] },
  });
  // bob's entry has only mail of those
  const bob = await api(template)('GET', '/users/bob', { token: ADMIN });
  t.deepEqual(bob.body.auth_state, { user_attributes: { mail: 'bob@hub.test' } });
});

test.serial('ldap hub: a wrong password and an unknown name read "Wrong name or password."; allowed_groups refuses a non-member', async (t) => {
  const [wrong, unknown, outsider] = await Promise.all([
    formLogin(browser(), template.url, 'bob', wrongPassword()),
    formLogin(browser(), template.url, 'nobody', wrongPassword()),
    formLogin(browser(), template.url, 'carol', PW.carol),
  ]);
  for (const page of [wrong, unknown]) {
    t.is(page.status, 403);
    t.is(loginError(page), MSG.invalid);
    t.regex(page.body, /name="_xsrf"/);
    t.false(hasLoginCookie(page));
  }
  t.is(outsider.status, 403);
  t.is(loginError(outsider), MSG.notInGroup);
  t.false(hasLoginCookie(outsider));
  t.is((await api(template)('GET', '/users/carol', { token: ADMIN })).status, 404, 'no user is created for someone refused');
  t.is((await api(template)('GET', '/users/nobody', { token: ADMIN })).status, 404);
  const carol = await eventsAbout(template, 'carol', (e) => e.some((x) => x.type === 'login.failure'));
  t.like(carol.find((x) => x.type === 'login.failure'), { outcome: 'denied', reason: 'not in an allowed group nor an allowed user', details: { via: 'ldap' } });
  const bob = await eventsAbout(template, 'bob', (e) => e.some((x) => x.type === 'login.failure'));
  t.like(bob.find((x) => x.type === 'login.failure'), { outcome: 'failed', reason: 'invalid credentials' });
});

test.serial('ldap hub: lookup_dn — found by a search as the search account, then bound as the person', async (t) => {
  const b = browser();
  const ok = await formLogin(b, lookup.url, 'dave', PW.dave);
  t.is(ok.status, 302, loginError(ok) ?? '');
  t.is(ok.location, `${lookup.url}/hub/home`);
  t.like((await whoami(b, lookup.url)).body, { name: 'dave', admin: false });
  // allow_all: carol, in no group, is in here
  t.is((await formLogin(browser(), lookup.url, 'carol', PW.carol)).status, 302);
  const wrong = await formLogin(browser(), lookup.url, 'dave', wrongPassword());
  t.is(wrong.status, 403);
  t.is(loginError(wrong), MSG.invalid);
});

test.serial('ldap hub: names built to break filters and DNs get the readable 403 page, never a 500, never a login', async (t) => {
  const names = ['*)(uid=*', '*', 'alice)(uid=*', '*)(|(uid=*', 'alice)(|(objectClass=*', 'al*', 'alice\\2a', 'alice,ou=people', `uid=alice,ou=people,${dir.base}`, 'alice\0', ')('];
  const lookedUp = () => (output.get(lookup)!.match(/"event":"ldap\.refused","why":"no such person"/g) ?? []).length;
  const lookedUpBefore = lookedUp();
  for (const hub of [template, lookup]) {
    for (const name of names) {
      for (const password of [PW.alice, wrongPassword(), '*']) {
        const b = browser();
        const page = await formLogin(b, hub.url, name, password);
        const what = `${hub === template ? 'template' : 'lookup'} hub, ${JSON.stringify(name)}`;
        t.is(page.status, 403, what);
        t.is(loginError(page), MSG.invalid, what);
        t.regex(page.headers['content-type'] ?? '', /^text\/html/, what);
        t.false(hasLoginCookie(page), what);
        t.is((await whoami(b, hub.url)).status === 200, false, what);
      }
    }
  }
  // on the lookup hub each name did reach the directory, escaped, and matched no one
  await waitFor('the lookup hub to log its searches', async () => (lookedUp() - lookedUpBefore >= names.length * 3 ? true : undefined), 5000);
  t.is(lookedUp() - lookedUpBefore, names.length * 3);
  // nothing was created and the real alice is unaffected (each attempt came from its own address)
  const users = await api(lookup)('GET', '/users', { token: ADMIN });
  t.deepEqual(users.body.map((u: { name: string }) => u.name).sort(), ['boss', 'carol', 'dave']);
  t.is((await formLogin(browser(), lookup.url, 'alice', PW.alice)).status, 302);
});

test.serial('ldap hub: a hung directory is an outage page within Hub.rpc_timeout, the API answers meanwhile, and it is no failed login', async (t) => {
  relayMode = 'hang';
  try {
    const b = browser(); // one address: LIMIT + 1 outages from it must not lock it (nor frank) out
    const logins = Promise.all(Array.from({ length: LIMIT + 1 }, () => timedLogin(b, lookup, 'frank', PW.frank)));
    await waitFor('a login to hang on the directory', async () => (hung.size > 0 ? true : undefined), 5000, 10);
    // while logins hang in the auth actor, the hub's API answers at its usual pace
    const started = performance.now();
    const root = await api(lookup)('GET', '', { token: ADMIN });
    const someone = await api(lookup)('GET', '/users/dave', { token: ADMIN });
    const apiMs = performance.now() - started;
    t.is(root.status, 200);
    t.is(someone.status, 200);
    t.true(hung.size > 0, 'the logins were still hanging while the API answered');
    t.true(apiMs < 500, `two API calls took ${apiMs.toFixed(0)} ms during the hang`);
    const pages = await logins;
    for (const page of pages) {
      t.is(page.status, 503, 'an outage, not a refusal');
      t.is(loginError(page), MSG.unavailable);
      t.false(hasLoginCookie(page));
      t.true(page.ms < RPC_TIMEOUT_S * 1000 + 300, `answered in ${page.ms.toFixed(0)} ms, Hub.rpc_timeout is ${RPC_TIMEOUT_S} s`);
    }
    t.log(`outage pages after ${pages.map((p) => p.ms.toFixed(0)).join(', ')} ms; the API answered two calls in ${apiMs.toFixed(0)} ms meanwhile`);
  } finally {
    relayMode = 'pass';
  }
  // the directory is back: the same person from the same address logs in (the outages counted for nothing)
  const back = await formLogin(browser(), lookup.url, 'frank', PW.frank);
  t.is(back.status, 302, loginError(back) ?? '');
  const events = await eventsAbout(lookup, 'frank', (e) => e.some((x) => x.type === 'login.success'));
  const outages = events.filter((x) => x.type === 'login.failure');
  t.is(outages.length, LIMIT + 1);
  for (const e of outages) t.like(e, { outcome: 'failed', reason: 'directory unreachable: timed out' });
  t.false(events.some((x) => x.type === 'login.lockout'));
});

test.serial('ldap hub: PasswordAuthenticator.failed_login_limit locks an ldap account out, even with its right password', async (t) => {
  for (let i = 0; i < LIMIT; i++) {
    const r = await formLogin(browser(), lookup.url, 'erin', wrongPassword());
    t.is(r.status, 403);
    t.is(loginError(r), MSG.invalid);
  }
  const refused = await formLogin(browser(), lookup.url, 'erin', PW.erin);
  t.is(refused.status, 403);
  t.regex(loginError(refused) ?? '', /^Too many failed logins\. Try again in \d+ seconds\.$/);
  // per address too: LIMIT failures from one address lock it for everyone
  const b = browser();
  for (let i = 0; i < LIMIT; i++) t.is((await formLogin(b, template.url, `guess${i}`, wrongPassword())).status, 403);
  const fromThere = await formLogin(b, template.url, 'bob', PW.bob);
  t.regex(loginError(fromThere) ?? '', /^Too many failed logins/);
  const events = await eventsAbout(lookup, 'erin', (e) => e.some((x) => x.type === 'login.lockout') && e.some((x) => x.reason === 'locked out'));
  t.like(events.find((x) => x.type === 'login.lockout'), { outcome: 'denied', reason: `${LIMIT} failed logins` });
});

test.serial('ldap hub: a directory that is down (slapd stopped) is an outage page within Hub.rpc_timeout; the API answers', async (t) => {
  await dir.stop();
  const page = await timedLogin(browser(), template, 'alice', PW.alice);
  t.is(page.status, 503, 'an outage, not a refusal');
  t.is(loginError(page), MSG.unavailable);
  t.false(hasLoginCookie(page));
  t.true(page.ms < RPC_TIMEOUT_S * 1000, `answered in ${page.ms.toFixed(0)} ms`);
  t.log(`outage page with slapd stopped after ${page.ms.toFixed(0)} ms`);
  t.is((await api(template)('GET', '/users/alice', { token: ADMIN })).status, 200);
  const e = await eventsAbout(template, 'alice', (x) => x.some((y) => y.type === 'login.failure'));
  t.like(e.find((x) => x.type === 'login.failure'), { outcome: 'failed', reason: 'directory unreachable: connection refused' });
});

test.serial('ldap hub: no password, right or wrong, appears in either hub\'s log output or audit trail', async (t) => {
  for (const hub of [template, lookup]) {
    const trail = JSON.stringify(await auditTrail(hub.natsUrl));
    const logs = `${hub.logs()}\n${output.get(hub)}`;
    t.true(/"event":"ldap\./.test(logs), 'the debug log did say something about the directory');
    t.log(`${hub === template ? 'template' : 'lookup'} hub: ${logs.length} characters of log output, ${trail.length} of audit trail, ${TYPED.size} passwords looked for`);
    for (const p of TYPED) {
      t.false(logs.includes(p), 'a password in the hub\'s log output');
      t.false(trail.includes(p), 'a password in the audit trail');
    }
  }
});
