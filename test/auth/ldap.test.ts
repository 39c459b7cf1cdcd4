// The "ldap" backend against a real OpenLDAP slapd started here (test/auth/slapd.ts): binding by templates and
// by lookup, refusals that say nothing about who exists, names built to break DNs and filters, group rules
// of each kind of group, manage_groups, auth state, StartTLS and LDAPS with a test CA, and a directory that
// is down or silent (an outage within the deadline, not a refusal). The backend is called directly, as the
// auth actor calls it.
import test, { type ExecutionContext } from 'ava';
import { writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { pino } from 'pino';
import { validateConfig } from '../../shared/config.js';
import { freePort } from '../harness.js';
import { createLdapAuthenticator, escapeDnValue, escapeFilterValue } from '../../services/auth/authenticators/ldap.js';
import type { Authenticator, AuthenticatorDeps, Verdict } from '../../services/auth/authenticators/contract.js';
import { startSlapd, type Slapd } from './slapd.js';

const PW = {
  alice: 'alice-secret-1', bob: 'bob-secret-2', carol: 'carol-secret-3', dave: 'dave-secret-4', sam: 'sam-secret-5',
  twin1: 'twin-secret-6', twin2: 'twin-secret-7', comma: 'comma-secret-8', star: 'star-secret-9', starx: 'starx-secret-10',
  pub: 'pub-secret-11', searcher: 'searcher-secret-12',
};
const ALL_PASSWORDS = Object.values(PW);

let dir: Slapd;
/** a port nothing listens on */
let deadPort: number;
/** a TCP server that accepts connections and never says a word */
let silent: Server;
let silentPort: number;
const silentSockets = new Set<Socket>();

test.before(async () => {
  dir = await startSlapd({
    tls: true,
    searchUser: { name: 'searcher', password: PW.searcher },
    people: [
      { uid: 'alice', password: PW.alice, mail: 'alice@hub.test', attributes: { displayName: 'Alice Liddell', telephoneNumber: ['+1 555 0100', '+1 555 0101'], employeeNumber: 'liddell' } },
      { uid: 'bob', password: PW.bob, mail: 'bob@hub.test' },
      { uid: 'carol', password: PW.carol },
      { uid: 'dave', password: PW.dave },
      { uid: 'sam', password: PW.sam, ou: 'staff' },
      { uid: 'twin1', password: PW.twin1, attributes: { cn: 'twin' } },
      { uid: 'twin2', password: PW.twin2, ou: 'staff', attributes: { cn: 'twin' } },
      { uid: 'comma,person', password: PW.comma },
      { uid: 'star*person', password: PW.star },
      { uid: 'starXperson', password: PW.starx },
      { uid: 'pub', password: PW.pub, ou: 'public' },
    ],
    groups: [
      { cn: 'scientists', kind: 'groupOfNames', members: ['alice', 'comma,person'], description: 'Science' },
      { cn: 'engineers', kind: 'groupOfUniqueNames', members: ['bob'] },
      { cn: 'physics', kind: 'posixGroup', members: ['carol'] },
      { cn: 'admins', kind: 'groupOfNames', members: ['alice'] },
      { cn: 'red-team', kind: 'groupOfNames', ou: 'teams', members: ['alice'] },
      { cn: 'blue-team', kind: 'posixGroup', ou: 'teams', members: ['alice', 'bob'] },
      { cn: 'green-team', kind: 'groupOfUniqueNames', ou: 'teams', members: ['bob'] },
    ],
  });
  deadPort = await freePort();
  silent = createServer((s) => {
    silentSockets.add(s);
    s.on('close', () => silentSockets.delete(s));
    s.on('error', () => {});
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  silentPort = (silent.address() as { port: number }).port;
});

test.after.always(async () => {
  for (const s of silentSockets) s.destroy();
  silent?.close();
  await dir?.stop();
});

const PEOPLE = () => `ou=people,${dir.base}`;
const TEMPLATES = () => [`uid={username},ou=staff,${dir.base}`, `uid={username},ou=people,${dir.base}`];

/** A backend on the test directory: plain LDAP and the two templates unless `ldap` says otherwise. */
function backend(ldap: Record<string, unknown> = {}, authenticator: Record<string, unknown> = {}): Authenticator {
  const config = validateConfig({
    Hub: { authenticator_class: 'ldap' },
    Authenticator: authenticator,
    LDAPAuthenticator: { server_address: '127.0.0.1', server_port: dir.port, tls_strategy: 'insecure', bind_dn_template: TEMPLATES(), ...ldap },
  });
  const a = createLdapAuthenticator({ config, log: pino({ level: 'silent' }) } as AuthenticatorDeps);
  const problems = a.configProblems?.() ?? [];
  if (problems.length) throw new Error(`test backend has config problems: ${problems.join('; ')}`);
  return a;
}

/**
 * One login with a fresh logger at debug level; asserts that neither the log nor the verdict holds any
 * password of the seed, and that the call answered by its deadline.
 */
async function login(t: ExecutionContext, a: Authenticator, username: string, password: string, deadlineMs = 5000): Promise<Verdict & { ms: number }> {
  const lines: string[] = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(s) });
  const started = Date.now();
  const v = await a.authenticate!({ username, hubName: username.toLowerCase(), password }, { deadline: started + deadlineMs, log });
  const ms = Date.now() - started;
  const said = JSON.stringify(v) + lines.join('');
  for (const p of [...ALL_PASSWORDS, password].filter(Boolean)) t.false(said.includes(p), `a password appears in the verdict or the log: ${said}`);
  t.true(ms <= deadlineMs + 250, `answered in ${ms} ms, past its ${deadlineMs} ms deadline`);
  return { ...v, ms };
}

const okName = (v: Verdict) => (v.ok ? v.identity.name : `refused: ${v.reason}`);

test('ldap escaping: RFC 4514 for DN values, RFC 4515 for filter values', (t) => {
  t.is(escapeDnValue('a,ou=x'), 'a\\,ou\\=x');
  t.is(escapeDnValue(' #a+b;c<d>e"f\\g '), '\\ #a\\+b\\;c\\<d\\>e\\"f\\\\g\\ ');
  t.is(escapeDnValue('#x'), '\\#x');
  t.is(escapeDnValue('a\0b'), 'a\\00b');
  t.is(escapeFilterValue('*)(uid=*'), '\\2a\\29\\28uid=\\2a');
  t.is(escapeFilterValue('a\\b\0'), 'a\\5cb\\00');
});

test('ldap: bind_dn_template list — the first template that binds wins, in order', async (t) => {
  const a = backend();
  t.deepEqual(a.offer, { form: true });
  t.false(a.admitsAllByDefault);
  t.false(a.hasAllowRule);
  const alice = await login(t, a, 'alice', PW.alice); // not under ou=staff: the second template binds
  t.true(alice.ok, okName(alice));
  if (alice.ok) {
    t.is(alice.identity.name, 'alice');
    t.is(alice.identity.email, 'alice@hub.test');
    t.is(alice.identity.allowed, undefined, 'no allowed_groups: no opinion');
    t.is(alice.identity.admin, undefined);
    t.is(alice.identity.groups, undefined, 'no groups configured: it knows none');
    t.is(alice.identity.authState, undefined);
  }
  const sam = await login(t, a, 'sam', PW.sam); // the first template
  t.true(sam.ok, okName(sam));
  const onlyStaff = backend({ bind_dn_template: [`uid={username},ou=staff,${dir.base}`] });
  t.like(await login(t, onlyStaff, 'alice', PW.alice), { ok: false, reason: 'invalid credentials' });
});

test('ldap: lookup_dn with a search user; lookup_dn_user_dn_attribute names the hub user', async (t) => {
  const base = { lookup_dn: true, bind_dn_template: [], user_search_base: dir.base, lookup_dn_search_user: dir.searchUserDn, lookup_dn_search_password: PW.searcher };
  const a = backend(base);
  const alice = await login(t, a, 'alice', PW.alice);
  t.true(alice.ok && alice.identity.name === 'alice' && alice.identity.email === 'alice@hub.test', okName(alice));
  t.true((await login(t, a, 'sam', PW.sam)).ok, 'found under ou=staff too');
  const renamed = backend({ ...base, lookup_dn_user_dn_attribute: 'employeeNumber' });
  t.is(okName(await login(t, renamed, 'alice', PW.alice)), 'liddell');
  t.like(await login(t, renamed, 'bob', PW.bob), { ok: false }, 'no such attribute on the entry: refused, not named by the login');
  const kept = backend({ ...base, lookup_dn_user_dn_attribute: 'employeeNumber', use_lookup_dn_username: false });
  t.is(okName(await login(t, kept, 'alice', PW.alice)), 'alice');
  const wrongSearcher = backend({ ...base, lookup_dn_search_password: 'not-the-searchers' });
  const v = await login(t, wrongSearcher, 'alice', PW.alice);
  t.like(v, { ok: false, unavailable: true }, 'a refused search account is the hub\'s trouble, not the person\'s');
});

test('ldap: lookup_dn anonymously — found where the directory lets anyone look, an outage where it refuses', async (t) => {
  const pub = backend({ lookup_dn: true, bind_dn_template: [], user_search_base: `ou=public,${dir.base}` });
  t.is(okName(await login(t, pub, 'pub', PW.pub)), 'pub');
  t.like(await login(t, pub, 'pub', 'wrong-password'), { ok: false, reason: 'invalid credentials' });
  const refused = await login(t, backend({ lookup_dn: true, bind_dn_template: [], user_search_base: dir.base }), 'alice', PW.alice);
  t.like(refused, { ok: false, unavailable: true });
  t.regex(refused.ok ? '' : refused.reason, /^directory unreachable: lookup_dn search refused/);
});

test('ldap: lookup_dn refuses a login that matches more than one entry', async (t) => {
  const a = backend({
    lookup_dn: true, bind_dn_template: [], user_search_base: dir.base, user_attribute: 'cn', valid_username_regex: '^[a-z0-9]+$',
    lookup_dn_search_user: dir.searchUserDn, lookup_dn_search_password: PW.searcher,
  });
  for (const pw of [PW.twin1, PW.twin2]) t.like(await login(t, a, 'twin', pw), { ok: false, reason: 'invalid credentials' });
  t.true((await login(t, a, 'twin1', PW.twin1)).ok, 'cn holds the uid too: one entry');
});

test('ldap: a wrong password and an unknown person get the same refusal, by templates and by lookup', async (t) => {
  const lookup = backend({ lookup_dn: true, bind_dn_template: [], user_search_base: dir.base, lookup_dn_search_user: dir.searchUserDn, lookup_dn_search_password: PW.searcher });
  for (const a of [backend(), lookup]) {
    const wrong = await login(t, a, 'alice', PW.bob);
    const nobody = await login(t, a, 'nobody', PW.alice);
    t.deepEqual({ ...wrong, ms: 0 }, { ok: false, reason: 'invalid credentials', ms: 0 });
    t.deepEqual({ ...nobody, ms: 0 }, { ok: false, reason: 'invalid credentials', ms: 0 });
  }
});

test('ldap: an empty password is refused before any request (an unauthenticated bind would succeed)', async (t) => {
  // against a directory that is down, a request would be an outage: the refusal proves none was made
  const down = backend({ server_port: deadPort });
  t.like(await login(t, down, 'alice', ''), { ok: false, reason: 'empty password' });
  t.like(await login(t, backend(), 'alice', ''), { ok: false, reason: 'empty password' });
  t.like(await login(t, down, 'alice', PW.alice), { ok: false, unavailable: true });
});

// (not ' alice' nor 'ALICE': the directory's own matching rules ignore leading spaces and case in uid, so those
// are alice to it, and the names reach us trimmed and go on lower-cased)
const INJECTIONS = ['*', '*)(uid=*', 'alice)(|(uid=*', 'alice*', 'a,ou=x', 'alice,ou=people', 'uid=alice', 'alice\0', '\0', 'alice\\', '#alice', 'alice)', '(uid=alice)', 'alice+cn=alice'];

test('ldap: names built to break DNs and filters are refused by valid_username_regex before any request', async (t) => {
  const down = backend({ server_port: deadPort });
  for (const name of INJECTIONS) {
    const v = await login(t, down, name, PW.alice);
    t.like(v, { ok: false, reason: 'name refused by valid_username_regex' }, JSON.stringify(name));
  }
});

test('ldap: with a regex that lets them through, they are escaped — never a match, never a throw', async (t) => {
  const anyName = { valid_username_regex: '^[\\s\\S]+$' };
  const byTemplate = backend(anyName);
  const byLookup = backend({ ...anyName, lookup_dn: true, bind_dn_template: [], user_search_base: dir.base, lookup_dn_search_user: dir.searchUserDn, lookup_dn_search_password: PW.searcher, allowed_groups: [dir.groupDn('scientists')] });
  for (const a of [byTemplate, byLookup]) {
    for (const name of INJECTIONS) {
      const v = await login(t, a, name, PW.alice); // alice's password: an injection that reached her entry would log in
      t.like(v, { ok: false, reason: 'invalid credentials' }, JSON.stringify(name));
    }
    // and the escaping is right, not merely refusing: people whose names hold such characters log in as themselves
    const comma = await login(t, a, 'comma,person', PW.comma);
    t.is(okName(comma), 'comma,person');
    const star = await login(t, a, 'star*person', PW.star); // unescaped, (uid=star*person) would match two entries
    t.is(okName(star), 'star*person');
  }
  const member = await login(t, byLookup, 'comma,person', PW.comma);
  t.true(member.ok && member.identity.allowed === true, 'a DN with an escaped comma is found in groupOfNames by the escaped filter');
});

test('ldap: allowed_groups of each kind (groupOfNames, groupOfUniqueNames, posixGroup); none → no opinion', async (t) => {
  const a = backend({ allowed_groups: [dir.groupDn('scientists'), dir.groupDn('engineers'), dir.groupDn('physics')] });
  t.true(a.hasAllowRule);
  for (const [who, pw] of [['alice', PW.alice], ['bob', PW.bob], ['carol', PW.carol]]) {
    const v = await login(t, a, who, pw);
    t.true(v.ok && v.identity.allowed === true, `${who}: ${JSON.stringify(v)}`);
  }
  const dave = await login(t, a, 'dave', PW.dave);
  t.true(dave.ok, 'outside every group: still who they say (the layer above decides)');
  t.is(dave.ok ? dave.identity.allowed : false, undefined);
  t.deepEqual(dave.ok ? dave.identity.groups : null, []);
  const onlyPosix = backend({ allowed_groups: [dir.groupDn('physics')] });
  const bob = await login(t, onlyPosix, 'bob', PW.bob);
  t.true(bob.ok && bob.identity.allowed === undefined);
  const missing = backend({ allowed_groups: [`cn=no-such-group,ou=groups,${dir.base}`, dir.groupDn('physics')] });
  const carol = await login(t, missing, 'carol', PW.carol);
  t.true(carol.ok && carol.identity.allowed === true, 'a group that does not exist is not a member, not an error');
});

test('ldap: admin_groups; groups without group_search_base are the configured groups the person is in', async (t) => {
  const a = backend({ allowed_groups: [dir.groupDn('scientists'), dir.groupDn('engineers')], admin_groups: [dir.groupDn('admins')] });
  const alice = await login(t, a, 'alice', PW.alice);
  t.true(alice.ok);
  if (alice.ok) {
    t.is(alice.identity.admin, true);
    t.is(alice.identity.allowed, true);
    t.deepEqual([...alice.identity.groups!].sort(), ['admins', 'scientists']);
  }
  const bob = await login(t, a, 'bob', PW.bob);
  t.true(bob.ok && bob.identity.admin === undefined && bob.identity.allowed === true);
  t.deepEqual(bob.ok ? bob.identity.groups : null, ['engineers']);
  const adminOnly = backend({ admin_groups: [dir.groupDn('admins')] });
  t.false(adminOnly.hasAllowRule);
  const a2 = await login(t, adminOnly, 'alice', PW.alice);
  t.true(a2.ok && a2.identity.admin === true && a2.identity.allowed === undefined);
  const named = backend({ allowed_groups: [dir.groupDn('scientists')], group_attributes: ['description', 'cn'] });
  const a3 = await login(t, named, 'alice', PW.alice);
  t.deepEqual(a3.ok ? a3.identity.groups : null, ['Science'], 'the first of group_attributes present names the group');
});

test('ldap: group_search_base with manage_groups: every group under it the person is in, of any kind', async (t) => {
  const a = backend({ group_search_base: `ou=teams,${dir.base}` }, { manage_groups: true });
  const cases: [string, string, string[]][] = [['alice', PW.alice, ['blue-team', 'red-team']], ['bob', PW.bob, ['blue-team', 'green-team']], ['dave', PW.dave, []]];
  for (const [who, pw, groups] of cases) {
    const v = await login(t, a, who, pw);
    t.deepEqual(v.ok ? [...v.identity.groups!].sort() : v, groups, who);
  }
  const whole = backend({ group_search_base: dir.base }, { manage_groups: true });
  const alice = await login(t, whole, 'alice', PW.alice);
  t.deepEqual(alice.ok ? [...alice.identity.groups!].sort() : alice, ['admins', 'blue-team', 'red-team', 'scientists']);
});

test('ldap: auth_state_attributes become auth state user_attributes (one value or several)', async (t) => {
  const a = backend({ auth_state_attributes: ['displayname', 'telephoneNumber', 'mail', 'description'] });
  const alice = await login(t, a, 'alice', PW.alice);
  t.deepEqual(alice.ok ? alice.identity.authState : alice, {
    user_attributes: { displayname: 'Alice Liddell', telephoneNumber: ['+1 555 0100', '+1 555 0101'], mail: 'alice@hub.test' },
  });
  const carol = await login(t, a, 'carol', PW.carol);
  t.deepEqual(carol.ok ? carol.identity.authState : carol, { user_attributes: {} });
  t.is(carol.ok ? carol.identity.email : 'x', undefined, 'no mail attribute: no e-mail');
});

test('ldap: StartTLS and LDAPS with the test CA; an untrusted CA is an outage with a TLS reason; CERT_NONE accepts it', async (t) => {
  const trusted = { ca_certs_file: dir.caFile, validate: 'CERT_REQUIRED' };
  const untrusted = { ca_certs_file: dir.otherCaFile, validate: 'CERT_REQUIRED' };
  const startTls = (tls_kwargs: object) => backend({ tls_strategy: 'before_bind', tls_kwargs });
  const ldaps = (tls_kwargs: object) => backend({ tls_strategy: 'on_connect', server_port: dir.ldapsPort, tls_kwargs });
  for (const make of [startTls, ldaps]) {
    const ok = await login(t, make(trusted), 'alice', PW.alice);
    t.is(okName(ok), 'alice');
    t.like(await login(t, make(trusted), 'alice', PW.bob), { ok: false, reason: 'invalid credentials' });
    const bad = await login(t, make(untrusted), 'alice', PW.alice);
    t.like(bad, { ok: false, unavailable: true });
    t.regex(bad.ok ? '' : bad.reason, /^directory unreachable: (StartTLS: )?TLS: /);
    t.is(okName(await login(t, make({ ca_certs_file: dir.otherCaFile, validate: 'CERT_NONE' }), 'alice', PW.alice)), 'alice');
    const noCa = await login(t, make({}), 'alice', PW.alice);
    t.like(noCa, { ok: false, unavailable: true }, 'no CA given: the system\'s, which does not know the test CA');
  }
  const plainToLdaps = await login(t, backend({ tls_strategy: 'on_connect', server_port: dir.port, tls_kwargs: trusted }), 'alice', PW.alice, 2000);
  t.like(plainToLdaps, { ok: false, unavailable: true }, 'LDAPS to a plain port');
});

test('ldap: a directory that is down or silent is an outage, answered by the deadline', async (t) => {
  const refused = await login(t, backend({ server_port: deadPort }), 'alice', PW.alice);
  t.deepEqual({ ...refused, ms: 0 }, { ok: false, unavailable: true, reason: 'directory unreachable: connection refused', ms: 0 });
  t.true(refused.ms < 1000, `refused in ${refused.ms} ms`);
  for (const tls_strategy of ['insecure', 'before_bind', 'on_connect']) {
    const v = await login(t, backend({ server_port: silentPort, tls_strategy, tls_kwargs: { ca_certs_file: dir.caFile } }), 'alice', PW.alice, 600);
    t.like(v, { ok: false, unavailable: true }, tls_strategy);
    t.regex(v.ok ? '' : v.reason, /^directory unreachable: .*timed out/, tls_strategy);
    t.true(v.ms >= 500, `${tls_strategy}: gave up after ${v.ms} ms, before its deadline`);
  }
  const late = await login(t, backend(), 'alice', PW.alice, -1);
  t.like(late, { ok: false, unavailable: true }, 'no time left: not even a connection');
});

test('ldap: a silent directory does not hold up other logins', async (t) => {
  const slow = backend({ server_port: silentPort });
  const fast = backend();
  const stuck = login(t, slow, 'alice', PW.alice, 1500);
  const started = Date.now();
  const quick = await Promise.all(['alice', 'bob', 'carol'].map((who) => login(t, fast, who, PW[who as 'alice'])));
  t.true(quick.every((v) => v.ok), JSON.stringify(quick));
  t.true(Date.now() - started < 1000, `three logins took ${Date.now() - started} ms beside a stuck one`);
  t.like(await stuck, { ok: false, unavailable: true });
});

test('ldap: configProblems names each missing or unusable option', (t) => {
  const problems = (ldap: Record<string, unknown>) => {
    const config = validateConfig({ Hub: { authenticator_class: 'ldap' }, LDAPAuthenticator: ldap });
    return createLdapAuthenticator({ config, log: pino({ level: 'silent' }) } as AuthenticatorDeps).configProblems!();
  };
  const none = problems({});
  t.true(none.some((p) => p.startsWith('LDAPAuthenticator.server_address')), none.join('\n'));
  t.true(none.some((p) => /bind_dn_template .*or lookup_dn/.test(p)), none.join('\n'));
  t.true(problems({ server_address: 'h', lookup_dn: true }).some((p) => p.startsWith('LDAPAuthenticator.user_search_base')));
  const unreadable = problems({ server_address: 'h', bind_dn_template: ['uid={username},dc=x'], tls_kwargs: { ca_certs_file: '/nonexistent/ca.pem' } });
  t.deepEqual(unreadable, ['LDAPAuthenticator.tls_kwargs.ca_certs_file: cannot read /nonexistent/ca.pem (ENOENT)']);
  t.true(problems({ server_address: 'h', bind_dn_template: ['uid={username},dc=x'], allowed_groups: ['cn=g,dc=x'], group_search_filter: '(member={userdn}' })
    .some((p) => p.startsWith('LDAPAuthenticator.group_search_filter')));
  const notPem = join(dir.dir, 'not-a-ca.pem');
  writeFileSync(notPem, 'not a certificate\n');
  t.deepEqual(problems({ server_address: 'h', bind_dn_template: ['uid={username},dc=x'], tls_kwargs: { ca_certs_file: notPem } }),
    [`LDAPAuthenticator.tls_kwargs.ca_certs_file: ${notPem} holds no PEM certificate`]);
  t.deepEqual(problems({ server_address: 'h', bind_dn_template: ['uid={username},dc=x'], tls_kwargs: { ca_certs_file: dir.caFile } }), []);
  t.deepEqual(problems({ server_address: 'h', lookup_dn: true, user_search_base: 'dc=x' }), []);
});
