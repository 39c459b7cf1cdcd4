// The "pam" authenticator against the machine's real PAM stack (the `login` service, pam_unix) and real accounts
// made for this file with useradd/chpasswd/usermod/chage (root only), removed afterwards. A wrong password costs
// 1.5-4.5 s, mostly near 3 (pam_faildelay delay=3000000 in /etc/pam.d/login, randomised by libpam), so the slow
// cases run side by side.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { validateConfig } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { createPamAuthenticator, pamAuthenticator, PAM_POOL_LIMITS, type PamPoolLimits } from '../../services/auth/authenticators/pam.js';
import { makeUnixAccounts, removeUnixAccounts } from './unix-accounts.js';
import type { Authenticator, Verdict } from '../../services/auth/authenticators/contract.js';

const log = createLogger('test-pam', 'silent');
const hex = () => randomBytes(3).toString('hex');
const secret = () => randomBytes(12).toString('base64url');

const MEMBERS = `hpg${hex()}`; // allowed_groups
const ADMINS = `hpa${hex()}`; // admin_groups
const account = (groups: string[] = []) => ({ name: `hp${hex()}`, password: secret(), groups });
const member = account([MEMBERS]);
const admin = account([MEMBERS, ADMINS]);
const outsider = account();
const locked = account();
const expired = account();
const ACCOUNTS = [member, admin, outsider, locked, expired];
const GROUPS = [MEMBERS, ADMINS];

test.before(() => {
  makeUnixAccounts('the pam tests', { groups: GROUPS, accounts: ACCOUNTS, locked, expired });
});

test.after.always(() => {
  removeUnixAccounts({ groups: GROUPS, accounts: ACCOUNTS });
});

function create(options: Record<string, unknown> = {}, limits?: PamPoolLimits): Authenticator {
  const config = validateConfig({ Hub: { authenticator_class: 'pam' }, PAMAuthenticator: options });
  const deps = { config, log, passwordOf: async () => undefined };
  return limits ? pamAuthenticator(deps, limits) : createPamAuthenticator(deps);
}

function backend(t: { teardown(f: () => Promise<void>): void }, options: Record<string, unknown> = {}, limits?: PamPoolLimits): Authenticator {
  const auth = create(options, limits);
  t.teardown(async () => auth.close?.());
  return auth;
}

// the default configuration, shared by the tests that need nothing else (each worker thread costs memory)
const defaults = create();
test.after.always(() => defaults.close?.());

function login(auth: Authenticator, username: string, password: string, withinMs = 20_000): Promise<Verdict> {
  return auth.authenticate!({ username, hubName: username.trim().toLowerCase(), password }, { deadline: Date.now() + withinMs, log });
}

function refusal(v: Verdict): { reason: string; unavailable?: boolean; message?: string } {
  if (v.ok) throw new Error(`expected a refusal, got ${JSON.stringify(v)}`);
  return v;
}

test('pam: the right password logs in with the Unix groups, primary and supplementary, by the name as typed', async (t) => {
  const auth = defaults;
  t.deepEqual(auth.offer, { form: true });
  t.false(auth.admitsAllByDefault);
  t.false(auth.hasAllowRule);
  const v = await login(auth, ` ${member.name} `, member.password);
  if (!v.ok) return t.fail(JSON.stringify(v));
  t.is(v.identity.name, member.name);
  t.deepEqual(v.identity.groups, [member.name, MEMBERS], 'useradd made a private primary group');
  t.is(v.identity.allowed, undefined, 'no allowed_groups: no opinion');
  t.is(v.identity.admin, undefined);
});

test('pam: a wrong password and an unknown name get the same reason, and nothing for the visitor', async (t) => {
  const auth = defaults;
  const [wrong, unknown, upper] = await Promise.all([
    login(auth, member.name, 'not-the-password'),
    login(auth, `hpnobody${hex()}`, 'whatever-password'),
    login(auth, member.name.toUpperCase(), member.password), // Unix names are case-sensitive
  ]);
  for (const v of [wrong, unknown, upper]) t.deepEqual(v, { ok: false, reason: 'invalid credentials' });
});

test('pam: a locked account is refused as locked, an expired one as expired unless check_account is off', async (t) => {
  const auth = defaults;
  const [lockedRight, lockedWrong, expiredRight, expiredWrong] = await Promise.all([
    login(auth, locked.name, locked.password),
    login(auth, locked.name, 'not-the-password'),
    login(auth, expired.name, expired.password),
    login(auth, expired.name, 'not-the-password'),
  ]);
  t.is(refusal(lockedRight).reason, 'account locked');
  t.is(refusal(lockedWrong).reason, 'account locked', 'the lock marker is read after any failure');
  t.is(refusal(expiredRight).reason, 'account expired');
  t.is(refusal(expiredWrong).reason, 'invalid credentials', 'expiry is told only to the right password');
  t.falsy(refusal(expiredRight).unavailable);
  const unchecked = await login(backend(t, { check_account: false }), expired.name, expired.password);
  t.true(unchecked.ok, JSON.stringify(unchecked));
});

test('pam: allowed_groups admits members (no opinion on others), admin_groups makes admins', async (t) => {
  const auth = backend(t, { allowed_groups: [MEMBERS], admin_groups: [ADMINS] });
  t.true(auth.hasAllowRule);
  const [m, a, o] = await Promise.all([login(auth, member.name, member.password), login(auth, admin.name, admin.password), login(auth, outsider.name, outsider.password)]);
  if (!m.ok || !a.ok || !o.ok) return t.fail(JSON.stringify([m, a, o]));
  t.deepEqual([m.identity.allowed, m.identity.admin], [true, undefined]);
  t.deepEqual([a.identity.allowed, a.identity.admin], [true, true]);
  t.deepEqual(a.identity.groups, [admin.name, MEMBERS, ADMINS]);
  t.deepEqual([o.identity.allowed, o.identity.admin], [undefined, undefined], 'allowed_users may still name an outsider');
});

test('pam: open_sessions opens and closes a session at login', async (t) => {
  const v = await login(backend(t, { open_sessions: true }), member.name, member.password);
  t.true(v.ok, JSON.stringify(v));
});

test('pam: input that cannot reach PAM intact is refused without asking it', async (t) => {
  const auth = backend(t, { encoding: 'latin1' });
  const started = Date.now();
  const verdicts = await Promise.all([
    login(auth, `${member.name}\0x`, member.password),
    login(auth, member.name, `${member.password}\0`),
    login(auth, `Ł${member.name.slice(1)}`, member.password), // latin1 would send "A…"
    login(auth, member.name, ''),
    login(auth, '   ', member.password),
    login(auth, 'x'.repeat(300), member.password),
  ]);
  for (const v of verdicts) t.is(refusal(v).reason, 'invalid credentials');
  t.true(Date.now() - started < 1000, 'no pam_faildelay: PAM was not asked');
});

test.serial('pam: logins in progress do not block the event loop, and run side by side', async (t) => {
  const auth = backend(t);
  let last = Date.now();
  let worstGap = 0;
  const ticker = setInterval(() => {
    const now = Date.now();
    worstGap = Math.max(worstGap, now - last);
    last = now;
  }, 5);
  const started = Date.now();
  const ended: number[] = [];
  const verdicts = await Promise.all([1, 2, 3].map(async () => {
    const v = await login(auth, member.name, 'not-the-password');
    ended.push(Date.now() - started);
    return v;
  }));
  clearInterval(ticker);
  for (const v of verdicts) t.is(refusal(v).reason, 'invalid credentials');
  t.log(`3 wrong passwords ended at ${ended.join(', ')} ms; the longest gap between 5 ms ticks ${worstGap} ms`);
  t.true(ended[0] >= 1400, 'pam_faildelay did hold each login');
  // one after another, each would end a whole pam_faildelay after the one before (the last at ~3× the first);
  // side by side, they all end within one of them, however slow the machine
  t.true(ended[2] - ended[0] < ended[0], `in parallel, not one after another: ended at ${ended.join(', ')} ms`);
  t.true(worstGap < 200, `a timer stalled ${worstGap} ms`);
});

test('pam: a deadline that passes answers unavailable at the deadline; the worker\'s late answer is dropped', async (t) => {
  const auth = backend(t, {}, { ...PAM_POOL_LIMITS, workers: 1 });
  const started = Date.now();
  const v = await login(auth, member.name, 'not-the-password', 300);
  const took = Date.now() - started;
  t.deepEqual(v, { ok: false, reason: 'PAM did not answer in time', unavailable: true });
  t.true(took >= 290 && took < 1000, `answered after ${took} ms`);
  t.deepEqual(await login(auth, member.name, member.password, -1), { ok: false, reason: 'PAM did not answer in time', unavailable: true }, 'a past deadline');
  // the single worker finishes the abandoned login, then serves the next one
  const next = await login(auth, member.name, member.password);
  t.true(next.ok, JSON.stringify(next));
});

test('pam: with every worker busy and the queue full, a login is unavailable at once', async (t) => {
  const auth = backend(t, {}, { workers: 1, queued: 1, idleMs: 1000 });
  const running = login(auth, member.name, 'not-the-password');
  const queued = login(auth, member.name, member.password);
  await new Promise((r) => setImmediate(r));
  const started = Date.now();
  const v = await login(auth, member.name, member.password);
  t.deepEqual(v, { ok: false, reason: 'PAM busy: too many logins waiting', unavailable: true });
  t.true(Date.now() - started < 100);
  t.is(refusal(await running).reason, 'invalid credentials');
  t.true((await queued).ok, 'the queued login ran once the worker was free');
});

test('pam: close() stops the workers; later logins are unavailable', async (t) => {
  const auth = backend(t);
  t.true((await login(auth, member.name, member.password)).ok);
  await auth.close!();
  t.true(refusal(await login(auth, member.name, member.password)).unavailable);
});

test('pam: configProblems names a missing PAM service and is empty for a working set-up', (t) => {
  t.deepEqual(backend(t).configProblems!(), []);
  const problems = backend(t, { service: `hub-missing-${hex()}` }).configProblems!();
  t.is(problems.length, 1);
  t.regex(problems[0], /\/etc\/pam\.d\/hub-missing-[0-9a-f]{6} does not exist/);
});
