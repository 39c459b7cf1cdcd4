// Logging in: the configured authenticator ("password" or "dummy"; "oauth" logs in through an external
// provider), lockouts after repeated failures (per user and per client address, kept in the store so a
// restart does not reset them), and the login sessions that `hub-hub-login` cookies name.
import { randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import type { AuditPublisher } from '../../shared/audit.js';
import type { HubConfig } from '../../shared/config.js';
import { errors } from '../../shared/errors.js';
import { HotHistogram, SLOW_BUCKETS, secondsSince } from '../../shared/metrics.js';
import { invalidNameReason, normalizeUsername } from '../../shared/names.js';
import { isoNow } from '../../shared/time.js';
import type { Announce } from '../../shared/nats.js';
import type { AuthStore, SessionRow } from './store.js';

const scrypt = promisify(scryptCb) as (password: string, salt: Buffer, keylen: number, options: { N: number; r: number; p: number; maxmem: number }) => Promise<Buffer>;
const SCRYPT = { N: 16384, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, 32, SCRYPT);
  return `scrypt:${SCRYPT.N}:${SCRYPT.r}:${SCRYPT.p}:${salt.toString('hex')}:${hash.toString('hex')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, expected] = stored.split(':');
  if (kind !== 'scrypt' || !salt || !expected) return false;
  const want = Buffer.from(expected, 'hex');
  const got = await scrypt(password, Buffer.from(salt, 'hex'), want.length, { N: Number(n), r: Number(r), p: Number(p), maxmem: SCRYPT.maxmem });
  return got.length === want.length && timingSafeEqual(got, want);
}

export const loginDuration = new HotHistogram('hub_login_duration_seconds',
  'Login attempts (form and identity provider), by status: success or failure', ['status'], SLOW_BUCKETS);
const loginOk = loginDuration.child('success');
const loginFailed = loginDuration.child('failure');

/** A password hash to compare against when the user has none, so timing does not tell who exists. */
const DECOY = hashPassword(randomBytes(16).toString('hex'));

export interface LoginDeps {
  config: HubConfig;
  store: AuthStore;
  audit: AuditPublisher;
  announce: Announce;
  /** makes sure the user exists (created at first login), with the admin flag config gives */
  ensureUser: (name: string, admin: boolean) => Promise<void>;
  /**
   * The authenticator's own word at refresh time (the external provider still vouches for the session's
   * user); without it, the user must still be allowed by Authenticator.allowed_users.
   */
  recheck?: (session: SessionRow) => Promise<boolean>;
}

export function createLoginHandlers({ config, store, audit, announce, ensureUser, recheck }: LoginDeps) {
  const P = config.PasswordAuthenticator;
  const A = config.Authenticator;
  const denied = (message = 'Invalid username or password') => ({ ok: false, name: '', session_id: '', message, retry_after: 0 });

  const isAdmin = (name: string) => A.admin_users.includes(name);
  const isAllowed = (name: string) => !A.allowed_users.length || A.allowed_users.includes(name) || isAdmin(name);

  /** Seconds left of a lockout on any of `keys`, or 0. */
  async function lockedFor(keys: string[]): Promise<number> {
    const windowMs = P.lockout_seconds * 1000;
    let wait = 0;
    for (const key of keys) {
      const f = await store.failuresSince(key, Date.now() - windowMs);
      if (f.n >= P.failed_login_limit) wait = Math.max(wait, Math.ceil((f.last + windowMs - Date.now()) / 1000));
    }
    return wait;
  }

  async function checkCredentials(name: string, password: string): Promise<boolean> {
    switch (config.Hub.authenticator_class) {
      case 'dummy':
        return config.DummyAuthenticator.password === '' || password === config.DummyAuthenticator.password;
      case 'password': {
        const stored = await store.passwordOf(name);
        const ok = await verifyPassword(password, stored ?? (await DECOY));
        return ok && stored !== undefined;
      }
      default:
        return false; // the external provider's flow logs people in, not a form
    }
  }

  async function openSession(name: string): Promise<string> {
    const id = randomBytes(16).toString('hex');
    const now = isoNow();
    await store.transaction(() => store.insertSession({ id, user_name: name, created: now, refreshed: now }));
    return id;
  }

  async function revokeSession(r: { session_id: string; by: string }) {
    const s = await store.getSession(r.session_id);
    if (!s) return { valid: false, user: '', session_id: r.session_id, created: '', refreshed: '' };
    await store.transaction(() => store.revokeSession(s.id));
    announce('session', 'revoked', { session_id: s.id, user: s.user_name });
    void audit.publish('login', 'logout', { who: r.by, what: s.user_name, outcome: 'ok' });
    return { valid: false, user: s.user_name, session_id: s.id, created: s.created, refreshed: s.refreshed };
  }

  // Handlers are called unbound (as gRPC handlers), so none of them may use `this`.
  return {
    openSession,

    async authenticate(r: { username: string; password: string; remote_addr: string }) {
      const start = performance.now();
      const name = normalizeUsername((r.username ?? '').trim(), config.Authenticator.username_map);
      const failure = (reason: string, outcome: 'failed' | 'denied' = 'failed') => {
        loginFailed.observe(secondsSince(start));
        void audit.publish('login', 'failure', { who: 'anonymous', what: name.slice(0, 100), outcome, reason, client: r.remote_addr });
      };
      if (!name || invalidNameReason(name) || typeof r.password !== 'string' || r.password.length > 4096) {
        failure('invalid user name or password');
        return denied();
      }
      if (config.Hub.authenticator_class === 'oauth') {
        failure('form login with an identity provider configured', 'denied');
        return denied('This hub logs in through its identity provider');
      }
      const keys = [`user:${name}`, `addr:${r.remote_addr}`];
      const wait = await lockedFor(keys);
      if (wait > 0) {
        failure('locked out', 'denied');
        return { ...denied(`Too many failed logins. Try again in ${wait} seconds.`), retry_after: wait };
      }
      const valid = await checkCredentials(name, r.password);
      if (!valid || !isAllowed(name)) {
        await store.transaction(() => store.recordFailure(keys, Date.now()));
        failure(valid ? 'not an allowed user' : 'invalid credentials');
        // the failure that reaches the limit starts a lockout: a security decision of its own
        const lockout = await lockedFor(keys);
        if (lockout > 0) {
          void audit.publish('login', 'lockout', {
            who: 'anonymous', what: name, outcome: 'denied', reason: `${P.failed_login_limit} failed logins`, client: r.remote_addr, seconds: lockout,
          });
        }
        return denied();
      }
      await store.transaction(() => store.clearFailures(keys[0]));
      await ensureUser(name, isAdmin(name));
      const sessionId = await openSession(name);
      loginOk.observe(secondsSince(start));
      void audit.publish('login', 'success', { who: `user:${name}`, what: name, outcome: 'ok', client: r.remote_addr });
      return { ok: true, name, session_id: sessionId, message: '', retry_after: 0 };
    },

    async setPassword(r: { name: string; password: string; by: string }) {
      if (typeof r.password !== 'string' || r.password.length < P.min_password_length) {
        throw errors.badRequest(`Passwords must be at least ${P.min_password_length} characters`);
      }
      const hashed = await hashPassword(r.password);
      if (!(await store.transaction(() => store.setPassword(r.name, hashed)))) throw errors.notFound(`No such user: ${r.name}`, 'HUB_ERR_USER_NOT_FOUND');
      void audit.publish('user', 'set_password', { who: r.by, what: r.name, outcome: 'ok' });
      return {};
    },

    async checkSession(r: { session_id: string }) {
      const s = typeof r.session_id === 'string' && r.session_id.length === 32 ? await store.getSession(r.session_id) : undefined;
      if (!s || s.revoked) return { valid: false, user: '', session_id: r.session_id, created: '', refreshed: '' };
      return { valid: true, user: s.user_name, session_id: s.id, created: s.created, refreshed: s.refreshed };
    },

    revokeSession,

    /** The user must still exist and still be allowed; otherwise the session ends and a new login is needed. */
    async refreshUser(r: { session_id: string; by: string }) {
      const s = await store.getSession(r.session_id);
      if (!s || s.revoked) return { valid: false, user: '', session_id: r.session_id, created: '', refreshed: '' };
      const stillThere = (await store.getUser(s.user_name)) !== undefined && (recheck ? await recheck(s) : isAllowed(s.user_name));
      if (!stillThere) return revokeSession({ session_id: s.id, by: 'actor:auth (refresh)' });
      const now = isoNow();
      await store.transaction(() => store.touchSession(s.id, now));
      return { valid: true, user: s.user_name, session_id: s.id, created: s.created, refreshed: now };
    },

    /** A deleted user's sessions end with them. */
    async endSessionsOf(name: string): Promise<void> {
      const ids = await store.transaction(() => store.revokeSessionsOf(name));
      for (const id of ids) announce('session', 'revoked', { session_id: id, user: name });
    },

    prune: () => store.transaction(() => store.pruneFailures(Date.now() - P.lockout_seconds * 1000)),
  };
}
