// Logging in through the configured authenticator (./authenticators/): the form (a name and a password, with
// lockouts after repeated failures per user and per client address, kept in the store so a restart does not reset
// them) or a redirect flow ("Sign in with …"); the login sessions that `hub-hub-login` cookies name; and refreshes
// (after Authenticator.auth_refresh_age, and before a spawn with refresh_pre_spawn), which ask the backend again.
// What a login said is kept with its session, sealed under a key derived from the cookie secret, so a refresh can
// judge it again. Passwords, codes and tokens never reach a log, an audit event or a message.
import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { AuditPublisher } from '../../shared/audit.js';
import { publicHubUrl, type HubConfig } from '../../shared/config.js';
import { errors } from '../../shared/errors.js';
import { cap, type Logger } from '../../shared/log.js';
import { HotHistogram, jupyterhubHistogram, SLOW_BUCKETS, secondsSince } from '../../shared/metrics.js';
import { isoNow } from '../../shared/time.js';
import type { Announce } from '../../shared/nats.js';
import { AuthStateCrypt, authStateField } from './auth-state.js';
import type { Authenticator, CallContext, Identity, Verdict } from './authenticators/contract.js';
import { MESSAGES, type IdentityPolicy } from './identity.js';
import { hashPassword } from './passwords.js';
import type { AuthStore, SessionRow } from './store.js';

// the established hub's family for the same measurement (its buckets, its series made ahead)
const establishedLogin = jupyterhubHistogram('login_duration_seconds', 'Login attempts, by status (success, failure)', ['status'], undefined, [['success'], ['failure']]);
export const loginDuration = new HotHistogram('hub_login_duration_seconds',
  'Login attempts (form and identity provider), by status: success or failure', ['status'], SLOW_BUCKETS, { also: ([status]) => establishedLogin.child(status) });
const loginOk = loginDuration.child('success');
const loginFailed = loginDuration.child('failure');

/** Room left for our own work and the reply within the caller's deadline. */
const MARGIN_MS = 300;
/** The gateway gives CompleteExternalLogin this many rpc timeouts (a code exchange, keys, user info, the login). */
export const COMPLETE_DEADLINE_FACTOR = 3;
const MAX_PASSWORD = 4096;

/** What a login said, kept (sealed) with its session: the backend's identity, judged again at each refresh. */
interface LoginState { allowed?: boolean; admin?: boolean; groups?: string[]; email?: string; authState?: Record<string, unknown> }

const stateOf = (i: Identity): LoginState => ({ allowed: i.allowed, admin: i.admin, groups: i.groups, email: i.email, authState: i.authState });

/** Where the backend sends browsers back. */
export const callbackUrl = (config: HubConfig): string => publicHubUrl(config, '/hub/oauth_callback');

export interface LoginDeps {
  config: HubConfig;
  store: AuthStore;
  audit: AuditPublisher;
  announce: Announce;
  log: Logger;
  authenticator: Authenticator;
  identity: IdentityPolicy;
}

export function createLoginHandlers({ config, store, audit, announce, log, authenticator, identity }: LoginDeps) {
  const P = config.PasswordAuthenticator;
  const A = config.Authenticator;
  const kind = config.Hub.authenticator_class;
  const rpcMs = config.Hub.rpc_timeout * 1000;
  const redirectUri = callbackUrl(config);
  const sealer = new AuthStateCrypt([new Uint8Array(createHmac('sha256', Buffer.from(config.Hub.cookie_secret, 'hex')).update('hub auth: login state').digest())]);
  const ctxWithin = (ms: number): CallContext => ({ deadline: Date.now() + ms - MARGIN_MS, log });
  const denied = (message: string, retryAfter = 0, unavailable = false) => ({ ok: false, name: '', session_id: '', message, retry_after: retryAfter, unavailable });
  const invalidSession = (id: string) => ({ valid: false, user: '', session_id: id, created: '', refreshed: '', logout_url: '' });

  /** Seconds left of a lockout on any of `keys` (0: none), and whether the first (the name) has failures to forget. */
  async function lockedFor(keys: string[]): Promise<{ wait: number; nameFailed: boolean }> {
    const windowMs = P.lockout_seconds * 1000;
    const failures = await store.failuresSince(keys, Date.now() - windowMs);
    let wait = 0;
    for (const f of failures.values()) {
      if (f.n >= P.failed_login_limit) wait = Math.max(wait, Math.ceil((f.last + windowMs - Date.now()) / 1000));
    }
    return { wait, nameFailed: failures.has(keys[0]) };
  }

  /** A login session with what the login said; `forgetFailuresOf`: the name's failed logins end in the same write. */
  async function openSession(name: string, state: LoginState, forgetFailuresOf?: string): Promise<string> {
    const id = randomBytes(16).toString('hex');
    const now = isoNow();
    const session = { id, user_name: name, created: now, refreshed: now };
    const sealed = sealer.encrypt(state as Record<string, unknown>);
    // the usual login writes one row; after failed attempts the name's failures go in the same transaction
    if (!forgetFailuresOf) await store.insertSession(session, sealed, { alone: true });
    else {
      await store.transaction(async () => {
        await store.insertSession(session, sealed);
        await store.clearFailures(forgetFailuresOf);
      });
    }
    return id;
  }

  async function revokeSession(r: { session_id: string; by: string; post_logout_redirect_uri?: string }) {
    const s = await store.getSession(r.session_id);
    if (!s) return invalidSession(r.session_id);
    const state = sealer.decrypt(await store.loginStateOf(s.id)) as LoginState | null;
    await store.transaction(() => store.revokeSession(s.id));
    announce('session', 'revoked', { session_id: s.id, user: s.user_name });
    void audit.publish('login', 'logout', { who: r.by, what: s.user_name, outcome: 'ok' });
    const logoutUrl = r.post_logout_redirect_uri && authenticator.logoutUrl
      ? await authenticator.logoutUrl({ authState: state?.authState ?? null, postLogoutRedirectUri: r.post_logout_redirect_uri }).catch(() => undefined)
      : undefined;
    return { valid: false, user: s.user_name, session_id: s.id, created: s.created, refreshed: s.refreshed, logout_url: logoutUrl ?? '' };
  }

  /** A backend's verdict, judged and (when in) turned into a user with a session. */
  async function finish(verdict: Verdict, start: number, via: string, client: string, typedName: string, forgetFailuresOf?: string) {
    const refused = (name: string, reason: string, message: string, outcome: 'failed' | 'denied') => {
      loginFailed.observe(secondsSince(start));
      log.info({ event: 'login.refused', via, user: name || undefined, reason: cap(reason, 200) }, 'login refused');
      void audit.publish('login', 'failure', { who: 'anonymous', what: name.slice(0, 100), outcome, via, reason: cap(reason, 200), client });
      return { ok: false as const, name, message, unavailable: !verdict.ok && verdict.unavailable === true };
    };
    if (!verdict.ok) {
      if (verdict.unavailable) {
        log.warn({ event: 'login.backend_unavailable', via, reason: cap(verdict.reason, 200) }, 'the authenticator could not decide');
        return refused(typedName, verdict.reason, verdict.message ?? MESSAGES.unavailable, 'failed');
      }
      return refused(typedName, verdict.reason, verdict.message ?? MESSAGES.invalid, 'failed');
    }
    const j = await identity.judge(verdict.identity);
    if (!j.ok) return refused(j.name, j.reason, j.message, 'denied');
    // the session's row and the user's own writes at once (the row names the user by name, no key to wait for);
    // a user who cannot be admitted leaves no session behind
    const opening = openSession(j.name, stateOf(verdict.identity), forgetFailuresOf);
    const admitted = identity.admit(j, verdict.identity, `actor:auth (login via ${via})`);
    const [opened, admission] = await Promise.allSettled([opening, admitted]);
    if (admission.status === 'rejected') {
      if (opened.status === 'fulfilled') await store.transaction(() => store.revokeSession(opened.value)).catch(() => undefined);
      throw admission.reason;
    }
    if (opened.status === 'rejected') throw opened.reason;
    const sessionId = opened.value;
    loginOk.observe(secondsSince(start));
    log.info({ event: 'login', via, user: j.name }, 'logged in');
    void audit.publish('login', 'success', { who: `user:${j.name}`, what: j.name, outcome: 'ok', via, client, ...(j.groups && A.manage_groups ? { groups: j.groups } : {}) });
    return { ok: true as const, name: j.name, session_id: sessionId };
  }

  /**
   * Asks the backend again about a session's user; ends the session when the answer is no. An authenticator that
   * cannot answer now (provider down) leaves the login as it was: the next request asks again.
   */
  async function refreshSession(s: SessionRow, by: string, ctx: CallContext): Promise<{ valid: boolean; refreshed: string }> {
    const state = (sealer.decrypt(await store.loginStateOf(s.id)) ?? {}) as LoginState;
    const end = async (reason: string) => {
      log.info({ event: 'login.refresh.refused', user: s.user_name, reason: cap(reason, 200) }, 'the authenticator no longer vouches for the login');
      void audit.publish('login', 'refresh', { who: by, what: s.user_name, outcome: 'denied', via: kind, reason: cap(reason, 200) });
      await revokeSession({ session_id: s.id, by: 'actor:auth (refresh)' });
      return { valid: false, refreshed: s.refreshed };
    };
    if ((await store.getUser(s.user_name)) === undefined) return end('the user no longer exists');
    const asked = authenticator.refresh ? await authenticator.refresh({ name: s.user_name, authState: state.authState ?? null }, ctx) : null;
    if (asked && !asked.ok && asked.unavailable) {
      log.warn({ event: 'login.refresh.unavailable', user: s.user_name, reason: cap(asked.reason, 200) }, 'the authenticator could not be asked; the login stands for now');
      throw errors.unavailable('The identity provider');
    }
    if (asked && !asked.ok) return end(asked.reason);
    // nothing new from the backend: what the login said is judged again (the lists may have changed since)
    const said: Identity = asked?.ok ? asked.identity : { name: s.user_name, ...state };
    const j = await identity.judge(said);
    if (!j.ok) return end(j.reason);
    if (j.name !== s.user_name) return end('the authenticator names another user');
    if (asked?.ok) {
      await identity.admit(j, said, `actor:auth (refresh via ${kind})`);
      await store.transaction(() => store.renewLoginState(s.id, sealer.encrypt(stateOf(said) as Record<string, unknown>)));
    } else if (j.admin !== undefined) {
      await identity.admit({ ...j, groups: undefined }, { name: s.user_name }, `actor:auth (refresh via ${kind})`);
    }
    const now = isoNow();
    await store.transaction(() => store.touchSession(s.id, now));
    void audit.publish('login', 'refresh', { who: by, what: s.user_name, outcome: 'ok', via: kind, ...(asked?.ok && j.groups && A.manage_groups ? { groups: j.groups } : {}) });
    return { valid: true, refreshed: now };
  }

  // Concurrent requests of one browser share one refresh (and one use of a rotating refresh token).
  const refreshing = new Map<string, Promise<{ valid: boolean; refreshed: string }>>();
  const refreshOnce = (s: SessionRow, by: string, ctx: CallContext) => {
    let p = refreshing.get(s.id);
    if (!p) {
      p = refreshSession(s, by, ctx).finally(() => refreshing.delete(s.id));
      refreshing.set(s.id, p);
    }
    return p;
  };

  function requireRedirect(): Required<Pick<Authenticator, 'loginUrl' | 'completeLogin'>> {
    if (!authenticator.loginUrl || !authenticator.completeLogin) throw errors.notFound('This hub does not log in through an external identity provider');
    return authenticator as Required<Pick<Authenticator, 'loginUrl' | 'completeLogin'>>;
  }

  // Handlers are called unbound (as gRPC handlers), so none of them may use `this`.
  return {
    loginOptions: async () => ({ form: authenticator.offer.form, button: authenticator.offer.button ?? '' }),

    async authenticate(r: { username: string; password: string; remote_addr: string }) {
      const start = performance.now();
      const typed = typeof r.username === 'string' ? r.username.trim() : '';
      const hubName = identity.normalize(typed);
      if (!authenticator.authenticate) {
        void audit.publish('login', 'failure', { who: 'anonymous', what: hubName.slice(0, 100), outcome: 'denied', via: kind, reason: 'form login with an identity provider configured', client: r.remote_addr });
        return denied('This hub logs in through its identity provider');
      }
      if (!typed || typeof r.password !== 'string' || r.password.length > MAX_PASSWORD || typed.length > 255) {
        await finish({ ok: false, reason: 'invalid user name or password' }, start, kind, r.remote_addr, hubName);
        return denied(MESSAGES.invalid);
      }
      const keys = [`user:${hubName}`, `addr:${r.remote_addr}`];
      const { wait, nameFailed } = await lockedFor(keys);
      if (wait > 0) {
        loginFailed.observe(secondsSince(start));
        void audit.publish('login', 'failure', { who: 'anonymous', what: hubName.slice(0, 100), outcome: 'denied', via: kind, reason: 'locked out', client: r.remote_addr });
        return denied(`Too many failed logins. Try again in ${wait} seconds.`, wait);
      }
      const verdict = await authenticator.authenticate({ username: typed, hubName, password: r.password }, ctxWithin(rpcMs));
      const out = await finish(verdict, start, kind, r.remote_addr, hubName, nameFailed ? keys[0] : undefined);
      if (out.ok) {
        return { ok: true, name: out.name, session_id: out.session_id, message: '', retry_after: 0 };
      }
      // an outage is nobody's failed attempt
      if (verdict.ok || !verdict.unavailable) {
        await store.transaction(() => store.recordFailure(keys, Date.now()));
        // the failure that reaches the limit starts a lockout: a security decision of its own
        const lockout = (await lockedFor(keys)).wait;
        if (lockout > 0) {
          void audit.publish('login', 'lockout', {
            who: 'anonymous', what: hubName.slice(0, 100), outcome: 'denied', reason: `${P.failed_login_limit} failed logins`, client: r.remote_addr, seconds: lockout,
          });
        }
      }
      return out.ok ? denied(MESSAGES.invalid) : denied(out.message, 0, out.unavailable);
    },

    async loginUrl(r: { state: string; code_challenge: string; nonce: string }) {
      const backend = requireRedirect();
      if (!r.state || r.state.length > 256) throw errors.badRequest('state: required, at most 256 characters');
      if ((r.nonce ?? '').length > 256 || (r.code_challenge ?? '').length > 256) throw errors.badRequest('nonce and code_challenge: at most 256 characters');
      return { url: await backend.loginUrl({ state: r.state, codeChallenge: r.code_challenge ?? '', nonce: r.nonce ?? '', redirectUri }) };
    },

    async completeLogin(r: { code: string; code_verifier: string; nonce: string; remote_addr: string }) {
      const backend = requireRedirect();
      const start = performance.now();
      const verdict: Verdict = !r.code || r.code.length > 4096
        ? { ok: false, reason: 'no code', message: 'The identity provider sent no usable code. Please try again.' }
        : await backend.completeLogin({ code: r.code, codeVerifier: r.code_verifier ?? '', nonce: r.nonce ?? '', redirectUri }, ctxWithin(COMPLETE_DEADLINE_FACTOR * rpcMs));
      const out = await finish(verdict.ok || verdict.message || verdict.unavailable ? verdict
        : { ...verdict, message: 'The identity provider did not accept this login. Please try again.' }, start, kind, r.remote_addr, '');
      if (out.ok) return { ok: true, name: out.name, session_id: out.session_id, message: '', retry_after: 0 };
      return denied(out.message, 0, out.unavailable);
    },

    async setPassword(r: { name: string; password: string; by: string }) {
      return setHubPassword({ config, store, audit }, r);
    },

    async checkSession(r: { session_id: string }) {
      const s = typeof r.session_id === 'string' && r.session_id.length === 32 ? await store.getSession(r.session_id) : undefined;
      if (!s || s.revoked) return invalidSession(r.session_id);
      return { valid: true, user: s.user_name, session_id: s.id, created: s.created, refreshed: s.refreshed, logout_url: '' };
    },

    revokeSession,

    /** The user must still exist and the authenticator still vouch for them; otherwise the session ends. */
    async refreshUser(r: { session_id: string; by: string }) {
      const s = typeof r.session_id === 'string' && r.session_id.length === 32 ? await store.getSession(r.session_id) : undefined;
      if (!s || s.revoked) return invalidSession(r.session_id);
      const out = await refreshOnce(s, r.by, ctxWithin(rpcMs));
      return { valid: out.valid, user: s.user_name, session_id: s.id, created: s.created, refreshed: out.refreshed, logout_url: '' };
    },

    /**
     * Before a server starts: with refresh_pre_spawn, the user's newest login (or the one named) is refreshed — a
     * refusal stops the start; then the environment Authenticator.auth_state_environment takes from the auth state.
     */
    async prepareSpawn(r: { user: string; session_id: string; by: string }) {
      if (A.refresh_pre_spawn) {
        const named = r.session_id ? await store.getSession(r.session_id) : undefined;
        const s = named && !named.revoked && named.user_name === r.user ? named : await store.latestSessionOf(r.user);
        if (s) {
          const out = await refreshOnce(s, r.by, ctxWithin(rpcMs));
          if (!out.valid) return { ok: false, message: 'Your login has expired; sign in again to start a server', environment: {} };
        }
      }
      const mapping = Object.entries(A.auth_state_environment);
      if (!mapping.length) return { ok: true, message: '', environment: {} };
      const state = await identity.authStateOf(r.user);
      const environment: Record<string, string> = {};
      for (const [name, path] of mapping) {
        const value = authStateField(state, path);
        if (value !== undefined) environment[name] = value;
      }
      return { ok: true, message: '', environment };
    },

    /**
     * What the hub as OpenID Connect provider says of a person (services/oauth/oidc.ts): `sub` never changes with a
     * rename and is never given to another person (SQLite may hand a deleted user's row id to the next one; with
     * the creation time it cannot repeat); the email is what the login named by `session_id` said.
     */
    async oidcClaims(r: { user: string; session_id: string }) {
      const user = await store.getUser(r.user);
      if (!user) throw errors.notFound(`No such user: ${cap(r.user, 100)}`, 'HUB_ERR_USER_NOT_FOUND');
      const s = r.session_id ? await store.getSession(r.session_id) : undefined;
      const mine = s && s.user_name === user.name ? s : undefined;
      const state = mine && !mine.revoked ? ((sealer.decrypt(await store.loginStateOf(mine.id)) ?? {}) as LoginState) : {};
      const shown = user.user_info ? (JSON.parse(user.user_info) as { display_name?: unknown }) : {};
      return {
        sub: oidcSubject(user.id, user.created),
        name: typeof shown.display_name === 'string' && shown.display_name ? shown.display_name : user.name,
        groups: JSON.parse(user.groups_json) as string[],
        email: typeof state.email === 'string' ? state.email : '',
        auth_time: mine ? Math.floor(Date.parse(mine.created) / 1000) || 0 : 0,
        session_valid: !!mine && !mine.revoked,
      };
    },

    /** A deleted user's sessions end with them. */
    async endSessionsOf(name: string): Promise<void> {
      const ids = await store.transaction(() => store.revokeSessionsOf(name));
      for (const id of ids) announce('session', 'revoked', { session_id: id, user: name });
    },

    prune: () => store.transaction(() => store.pruneFailures(Date.now() - P.lockout_seconds * 1000)),
  };
}

/** A person's OpenID Connect subject: opaque, from the row's id and creation time (both fixed for the row's life). */
export function oidcSubject(id: number, created: string): string {
  return createHash('sha256').update(`hub-user:${id}:${created}`).digest('base64url').slice(0, 32);
}

/** The hub's own password of a user (`hub add-user`, `hub set-password`, the API, the first-admin set-up). */
export async function setHubPassword({ config, store, audit }: Pick<LoginDeps, 'config' | 'store' | 'audit'>, r: { name: string; password: string; by: string }) {
  const P = config.PasswordAuthenticator;
  if (typeof r.password !== 'string' || r.password.length < P.min_password_length) {
    throw errors.badRequest(`Passwords must be at least ${P.min_password_length} characters`);
  }
  if (r.password.length > MAX_PASSWORD) throw errors.badRequest(`Passwords must be at most ${MAX_PASSWORD} characters`);
  const hashed = await hashPassword(r.password);
  if (!(await store.transaction(() => store.setPassword(r.name, hashed)))) throw errors.notFound(`No such user: ${r.name}`, 'HUB_ERR_USER_NOT_FOUND');
  void audit.publish('user', 'set_password', { who: r.by, what: r.name, outcome: 'ok' });
  return {};
}
