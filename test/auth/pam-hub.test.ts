// The "pam" authenticator through a whole hub: real Unix accounts (useradd/chpasswd/usermod/chage, root only,
// removed afterwards) logging in through the hub's own form, and what a person sees — the pages, the API — and
// what an operator sees: the audit trail (HUB_AUDIT) with the real reasons behind one visitor message, and logs
// without any password. One hub: PAMAuthenticator.allowed_groups, admin_groups and Authenticator.manage_groups
// together. A wrong password costs 1.5-4.5 s (pam_faildelay), so the slow refusals run side by side (at most four
// at once: the PAM pool has four workers) and Hub.rpc_timeout is raised so that a queued PAM call is never late.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { auditTrail, type AuditEvent } from '../spawner/helpers.js';
import { makeUnixAccounts, removeUnixAccounts } from './unix-accounts.js';
import { Browser, formLogin, whoami, type Page } from './helpers.js';

const hex = () => randomBytes(3).toString('hex');
const secret = () => `pw-${randomBytes(12).toString('base64url')}`;

const MEMBERS = `hhg${hex()}`; // PAMAuthenticator.allowed_groups
const ADMINS = `hha${hex()}`; // PAMAuthenticator.admin_groups
const account = (groups: string[]) => ({ name: `hh${hex()}`, password: secret(), groups });
const member = account([MEMBERS]);
const admin = account([MEMBERS, ADMINS]);
const outsider = account([]);
const locked = account([MEMBERS]);
const expired = account([MEMBERS]);
const lockee = account([MEMBERS]);
const ACCOUNTS = [member, admin, outsider, locked, expired, lockee];
const GROUPS = [MEMBERS, ADMINS];
/** every password typed into the form in this file, right or wrong: none may reach a log or an audit event */
const TYPED = new Set(ACCOUNTS.map((a) => a.password));
const wrongPassword = () => {
  const p = secret();
  TYPED.add(p);
  return p;
};

const ADMIN = randomToken();
const LIMIT = 3;
const MSG = {
  invalid: 'Wrong name or password.',
  notInGroup: 'Your account is not in a group allowed to use this hub.',
};

let hub: HubUnderTest;
let api: ApiCall;
/** everything the hub wrote after it was up (the harness keeps the last 200 kB; this keeps it all) */
let output = '';
/** each test's browsers get their own client addresses, so lockouts per address never cross tests */
let nextAddress = 10;
const browser = () => new Browser(`127.0.0.${nextAddress++}`);


test.before(async () => {
  makeUnixAccounts('the pam hub tests', { groups: GROUPS, accounts: ACCOUNTS, locked, expired });

  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, authenticator_class: 'pam', rpc_timeout: 12, log_level: 'debug' },
      Authenticator: { admin_users: ['boss'], manage_groups: true },
      PAMAuthenticator: { allowed_groups: [MEMBERS], admin_groups: [ADMINS] },
      PasswordAuthenticator: { failed_login_limit: LIMIT, lockout_seconds: 300 },
    },
  });
  const keep = (chunk: Buffer) => { output += chunk.toString(); };
  hub.proc.stdout!.on('data', keep);
  hub.proc.stderr!.on('data', keep);
  api = apiClient(hub.url);
});

test.after.always(async () => {
  await hub?.stop();
  removeUnixAccounts({ groups: GROUPS, accounts: ACCOUNTS });
});

/** The message the login page shows, unescaped; null when it shows none. */
function loginError(page: Page): string | null {
  const m = /<p class="error" id="login-error">([^<]*)<\/p>/.exec(page.body);
  return m ? m[1].replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n))).replace(/&amp;/g, '&') : null;
}

/** The hub user as an admin sees it through the API. */
async function hubUser(name: string) {
  return api('GET', `/users/${name}`, { token: ADMIN });
}

/** The audit events about `what`, once `ready` says they are all there. */
async function eventsAbout(what: string, ready: (e: AuditEvent[]) => boolean): Promise<AuditEvent[]> {
  return waitFor(`the audit events about ${what}`, async () => {
    const e = (await auditTrail(hub.natsUrl)).filter((x) => x.what === what);
    return ready(e) ? e : undefined;
  }, 10_000, 200);
}

test.serial('pam hub: a Unix account logs in through the form; whoami answers its name; its hub groups are its Unix groups', async (t) => {
  const b = browser();
  const ok = await formLogin(b, hub.url, member.name, member.password);
  t.is(ok.status, 302, loginError(ok) ?? '');
  t.is(ok.location, `${hub.url}/hub/home`);
  t.truthy(b.cookie(hub.url, 'hub-hub-login'));
  const me = await whoami(b, hub.url);
  t.is(me.status, 200);
  t.is(me.body.name, member.name);
  t.false(me.body.admin);
  // manage_groups: every Unix group PAM's name service reports, the private primary group (useradd made one) first
  const u = await hubUser(member.name);
  t.is(u.status, 200);
  t.deepEqual([...u.body.groups].sort(), [member.name, MEMBERS].sort());
  t.false(u.body.admin);
  const g = await api('GET', `/groups/${MEMBERS}`, { token: ADMIN });
  t.is(g.status, 200, 'the group was created in the hub');
  t.true(g.body.users.includes(member.name));
  const success = await eventsAbout(member.name, (e) => e.some((x) => x.type === 'login.success'));
  t.like(success.find((x) => x.type === 'login.success'), { who: `user:${member.name}`, outcome: 'ok', details: { via: 'pam' } });
});

test.serial('pam hub: admin_groups makes a member of the group a hub admin', async (t) => {
  const b = browser();
  const ok = await formLogin(b, hub.url, admin.name, admin.password);
  t.is(ok.status, 302, loginError(ok) ?? '');
  t.like((await whoami(b, hub.url)).body, { name: admin.name, admin: true });
  const u = await hubUser(admin.name);
  t.is(u.body.admin, true);
  t.deepEqual([...u.body.groups].sort(), [admin.name, MEMBERS, ADMINS].sort());
  // the admin's own login can use the admin API
  const users = await b.get(`${hub.url}/hub/api/users`, { accept: 'application/json' });
  t.is(users.status, 200);
});

test.serial('pam hub: a wrong password, a locked and an expired account all read "Wrong name or password."; the audit trail tells them apart', async (t) => {
  const [wrong, lockedRight, expiredRight, outsiderRight] = await Promise.all([
    formLogin(browser(), hub.url, member.name, wrongPassword()),
    formLogin(browser(), hub.url, locked.name, locked.password),
    formLogin(browser(), hub.url, expired.name, expired.password),
    formLogin(browser(), hub.url, outsider.name, outsider.password),
  ]);
  for (const [page, who] of [[wrong, 'wrong password'], [lockedRight, 'locked'], [expiredRight, 'expired']] as const) {
    t.is(page.status, 403, who);
    t.is(loginError(page), MSG.invalid, who);
    t.regex(page.body, /name="_xsrf"/, `${who}: the form again`);
    t.false(/locked|expired/i.test(page.body), `${who}: the page says nothing about the account's state`);
  }
  // allowed_groups: a real account with the right password, outside the group
  t.is(outsiderRight.status, 403);
  t.is(loginError(outsiderRight), MSG.notInGroup);
  for (const page of [wrong, lockedRight, expiredRight, outsiderRight]) {
    t.false((page.headers['set-cookie'] ?? []).some((c) => c.startsWith('hub-hub-login=')), 'no login cookie');
  }
  t.is((await hubUser(outsider.name)).status, 404, 'no user is created for someone refused');
  t.is((await hubUser(locked.name)).status, 404);
  t.is((await hubUser(expired.name)).status, 404);

  const failure = (what: string) => eventsAbout(what, (e) => e.some((x) => x.type === 'login.failure'))
    .then((e) => e.find((x) => x.type === 'login.failure')!);
  const [w, l, x, o] = await Promise.all([member.name, locked.name, expired.name, outsider.name].map(failure));
  t.like(w, { who: 'anonymous', outcome: 'failed', reason: 'invalid credentials', details: { via: 'pam' } });
  t.like(l, { who: 'anonymous', outcome: 'failed', reason: 'account locked' });
  t.like(x, { who: 'anonymous', outcome: 'failed', reason: 'account expired' });
  t.like(o, { who: 'anonymous', outcome: 'denied', reason: 'not in an allowed group nor an allowed user' });
});

test.serial('pam hub: PasswordAuthenticator.failed_login_limit locks a pam account out, even with its right password', async (t) => {
  const tries = await Promise.all(Array.from({ length: LIMIT }, () => formLogin(browser(), hub.url, lockee.name, wrongPassword())));
  for (const r of tries) {
    t.is(r.status, 403);
    t.is(loginError(r), MSG.invalid);
  }
  const started = Date.now();
  const refused = await formLogin(browser(), hub.url, lockee.name, lockee.password);
  t.is(refused.status, 403);
  t.regex(loginError(refused) ?? '', /^Too many failed logins\. Try again in \d+ seconds\.$/);
  t.true(Date.now() - started < 1000, 'refused before PAM is asked (no pam_faildelay)');
  t.is((await hubUser(lockee.name)).status, 404);
  const events = await eventsAbout(lockee.name, (e) => e.some((x) => x.type === 'login.lockout') && e.some((x) => x.reason === 'locked out'));
  t.is(events.filter((x) => x.type === 'login.failure' && x.reason === 'invalid credentials').length, LIMIT);
  t.like(events.find((x) => x.type === 'login.lockout'), { outcome: 'denied', reason: `${LIMIT} failed logins` });
  // another account, from a fresh address, is not affected
  t.is((await formLogin(browser(), hub.url, member.name, member.password)).status, 302);
});

test.serial('pam hub: no password, right or wrong, appears in the hub\'s log output or in any audit event', async (t) => {
  const trail = JSON.stringify(await auditTrail(hub.natsUrl));
  const logs = `${hub.logs()}\n${output}`;
  t.true(/"event":"login\.refused"/.test(logs) && /PAM refused a login/.test(logs), 'the debug log did say something about the logins');
  t.log(`${logs.length} characters of log output, ${trail.length} of audit trail, ${TYPED.size} passwords looked for`);
  t.true(TYPED.size >= ACCOUNTS.length + LIMIT + 1);
  for (const p of TYPED) {
    t.false(logs.includes(p), 'a password in the hub\'s log output');
    t.false(trail.includes(p), 'a password in the audit trail');
  }
});
