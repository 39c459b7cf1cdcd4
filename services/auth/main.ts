// The auth actor: users, groups, logins through the configured authenticator (./authenticators/), their sessions
// and auth state. Wiring only.
import { Lease, leaseKey } from '../../shared/lease.js';
import { runActor } from '../../shared/actor.js';
import type { HubConfig } from '../../shared/config.js';
import { liveConfig } from '../../shared/reload.js';
import { storeLocation } from '../../shared/store.js';
import { gauge, jupyterhubName } from '../../shared/metrics.js';
import { createAnnouncer, decodeJson } from '../../shared/nats.js';
import { parseEventSubject, subjects } from '../../shared/subjects.js';
import { errors } from '../../shared/errors.js';
import { parseJson } from '../../shared/json.js';
import { AuthStateCrypt, parseCryptKeys } from './auth-state.js';
import { loadAuthenticator } from './authenticators/index.js';
import { createAuthHandlers } from './handlers.js';
import { createIdentity } from './identity.js';
import { createLoginHandlers } from './login.js';
import { createFirstAdminSetup } from './setup.js';
import { AuthStore } from './store.js';

await runActor('auth', async (ctx) => {
  // With a shared database, other nodes' auth actors add and remove users too: their events keep this one's index in
  // line; so do those of the auth actor this one replaces (`hub restart`) while it finishes its calls on the same
  // file. Subscribed before the store opens (events meanwhile are kept and applied once it is open): a user made
  // while the index loads is in the load or in an event.
  const location = storeLocation(ctx.config.Hub, 'auth');
  const followingPredecessor = location.kind === 'sqlite' && ctx.predecessor.running;
  type Followed = ['user' | 'group', string, unknown];
  let applyFollowed: ((event: Followed) => void) | null = null;
  const early: Followed[] = [];
  const follow = location.kind !== 'sqlite' || followingPredecessor
    ? (['user', 'group'] as const).map((entity) => ctx.nc.subscribe(subjects.eventsOf(entity), {
      callback: (_e, m) => {
        const event: Followed = [entity, parseEventSubject(m.subject).change, decodeJson(m.data)];
        if (applyFollowed) applyFollowed(event);
        else early.push(event);
      },
    }))
    : [];
  if (follow.length) await ctx.nc.flush();
  const store = await AuthStore.open(location);
  if (followingPredecessor) store.othersWrite = true;
  applyFollowed = ([entity, change, body]) => void store.followEvent(entity, change, body as { name?: string })
    .catch((err) => ctx.log.error({ event: 'auth.follow_event.failed', err }, 'another auth actor\'s user change not applied here'));
  for (const event of early.splice(0)) applyFollowed(event);
  // The user index loads behind the first requests; a store that cannot be read whole is fatal (the supervisor restarts us).
  const loadStart = performance.now();
  store.indexLoaded.then(
    () => ctx.log.info({ event: 'users.indexed', ms: Math.round(performance.now() - loadStart), bytes: store.indexBytes }, 'user index loaded'),
    (e: unknown) => {
      if (store.closing) return;
      ctx.log.fatal({ event: 'users.index_failed', err: e }, 'cannot load the user index');
      process.exit(1);
    });
  // options read at use (Authenticator.username_map of the API and the set-up page) through a view `hub reload` moves on
  const live = liveConfig(ctx.config);
  const h = createAuthHandlers({
    store,
    audit: ctx.audit,
    announce: createAnnouncer(ctx.nc),
    activityFlushMs: Math.max(1000, ctx.config.Hub.activity_resolution * 1000),
    maxJsonDepth: ctx.config.Hub.max_json_depth,
    usernameMap: () => live.config.Authenticator.username_map,
  });

  const ensureUser = h.ensureLoginUser;
  // Auth state needs its key (given to this actor alone by the supervisor, when the hub starts with auth state on);
  // without one the hub does not start, and `hub reload` cannot turn it on (shared/reload.ts says so)
  const cryptFor = (config: HubConfig): AuthStateCrypt | null => {
    if (!config.Authenticator.enable_auth_state) return null;
    const keys = parseCryptKeys(process.env);
    if ('problem' in keys) throw new Error(keys.problem);
    return new AuthStateCrypt(keys.keys);
  };
  let crypt = cryptFor(ctx.config);
  /** The authenticator and what judges its answers, from one configuration: made at start and by `hub reload`. */
  const loginParts = async (config: HubConfig, crypt: AuthStateCrypt | null) => {
    const authenticator = await loadAuthenticator(config.Hub.authenticator_class, { config, log: ctx.log, passwordOf: (name) => store.passwordOf(name) });
    const identity = createIdentity({
      config, store, audit: ctx.audit, log: ctx.log, authenticator, crypt, ensureUser, setUserGroups: h.setUserGroups, setUserInfo: h.setUserInfo, setUserRoles: h.setUserRoles,
    });
    const login = createLoginHandlers({ config, store, audit: ctx.audit, announce: createAnnouncer(ctx.nc), log: ctx.log, authenticator, identity });
    return { authenticator, identity, login };
  };
  let { authenticator, identity, login } = await loginParts(ctx.config, crypt);
  type Login = typeof login;
  /** `login[key]` of whichever login handlers are current when it is called */
  const late = <K extends keyof Login>(key: K): Login[K] =>
    ((request: unknown, call: unknown) => (login[key] as (r: unknown, c: unknown) => unknown)(request, call)) as Login[K];
  /** Authenticator.admin_users exist and are admins (at start, and when a reload names more) */
  const ensureAdmins = async (names: readonly string[]) => {
    for (const name of names) {
      const existing = await h.getUsers({ names: [name] });
      if (!existing.users.length) await h.createUser({ name, admin: true, by: 'config' });
      else if (!existing.users[0].admin) await h.updateUser({ name, admin: true, by: 'config' });
    }
  };
  if (followingPredecessor) {
    void ctx.predecessor.gone.then(async () => {
      // its last events were flushed before it exited: a drain of the subscriptions hears them all
      await Promise.all(follow.map((s) => s.drain().catch(() => undefined)));
      follow.length = 0;
      store.othersWrite = false;
      await store.learnFailingKeys();
    }).catch((err) => ctx.log.error({ event: 'auth.follow_end.failed', err }, 'could not stop following the replaced auth actor'));
  }
  // with auth on several nodes, one of them prunes old login failures (they share the store)
  const pruneLease = await Lease.start(ctx.nc, leaseKey('auth', 'prune'), { holder: ctx.instance, log: ctx.log });
  const prune = setInterval(() => void (pruneLease.held ? login.prune() : undefined), 600_000);
  prune.unref();

  // Users and active users (24h, 7d, 30d), counted by one query at most once a minute (the established
  // hub recounts hourly): a scrape never makes the auth actor scan its users table.
  const PERIODS = [['24h', 86_400_000], ['7d', 7 * 86_400_000], ['30d', 30 * 86_400_000]] as const;
  let counts: { total: number; active: number[] } | null = null;
  let countedAt = 0;
  const recount = async () => {
    if (Date.now() - countedAt < 60_000 && counts) return counts;
    countedAt = Date.now();
    counts = await store.userCounts(PERIODS.map(([, ms]) => new Date(Date.now() - ms).toISOString()));
    return counts;
  };
  // under our names and the established hub's (same count, same period labels)
  for (const prefix of ['hub_', jupyterhubName('')]) {
    gauge(`${prefix}total_users`, 'Users in the hub', [], async (g) => g.set((await recount()).total));
    gauge(`${prefix}active_users`, 'Users active within a period (24h, 7d, 30d), recounted at most once a minute', ['period'], async (g) => {
      const c = await recount();
      PERIODS.forEach(([period], i) => g.set({ period }, c.active[i]));
    });
  }

  // Configured admins exist and are admins from the first start on.
  await ensureAdmins(ctx.config.Authenticator.admin_users);

  const setup = await createFirstAdminSetup({
    config: live.config, store, audit: ctx.audit, log: ctx.log, ensureUser, setPassword: login.setPassword, getUser: h.getUser,
  });

  return {
    grpc: {
      GetUser: h.getUser, GetUsers: h.getUsers, ListUsers: h.listUsers, CreateUsers: h.createUsers, CreateUser: h.createUser,
      // a deleted or renamed user's logins end with the old name
      UpdateUser: async (r: Parameters<typeof h.updateUser>[0]) => {
        const out = await h.updateUser(r);
        if (r.new_name !== undefined && r.new_name !== r.name) await login.endSessionsOf(r.name);
        return out;
      },
      DeleteUser: async (r: Parameters<typeof h.deleteUser>[0]) => {
        const out = await h.deleteUser(r);
        await login.endSessionsOf(r.name);
        return out;
      },
      RecordActivity: h.recordActivity,
      GetGroup: h.getGroup, GroupMembers: h.groupMembers, ListGroups: h.listGroups, CreateGroups: h.createGroups, DeleteGroup: h.deleteGroup,
      ChangeGroupMembers: h.changeGroupMembers, SetGroupProperties: h.setGroupProperties,
      // through `login` at each call: a reload may have made a new one
      Authenticate: late('authenticate'), SetPassword: late('setPassword'), CheckSession: late('checkSession'),
      RevokeSession: late('revokeSession'), RefreshUser: late('refreshUser'), OidcClaims: late('oidcClaims'), LoginOptions: late('loginOptions'),
      PrepareSpawn: late('prepareSpawn'), ExternalLoginUrl: late('loginUrl'), CompleteExternalLogin: late('completeLogin'),
      GetAuthState: async (r: { name: string }) => {
        await h.getUser({ name: r.name }); // 404 for no such user
        return { enabled: crypt !== null, state_json: JSON.stringify(await identity.authStateOf(r.name)) };
      },
      SetAuthState: async (r: { name: string; state_json: string; by: string }) => {
        if (!crypt) throw errors.badRequest('Auth state is not enabled on this hub (Authenticator.enable_auth_state)');
        await h.getUser({ name: r.name });
        const state = parseJson(r.state_json, ctx.config.Hub.max_json_depth, 'auth_state');
        if (state !== null && (typeof state !== 'object' || Array.isArray(state))) throw errors.badRequest('auth_state must be a JSON object or null');
        await identity.setAuthState(r.name, state as Record<string, unknown> | null, r.by);
        return { enabled: true, state_json: JSON.stringify(await identity.authStateOf(r.name)) };
      },
      SetupStatus: setup.setupStatus, CompleteSetup: setup.completeSetup,
    },
    // `hub reload`: the Authenticator options and the authenticator's own section (who may log in, who is admin, how
    // names map, whether new auth state is kept); the new one is made whole first, so a failure leaves the running one
    reload: async (next) => {
      const nextCrypt = cryptFor(next);
      const made = await loginParts(next, nextCrypt);
      const previous = authenticator;
      ({ authenticator, identity, login } = made);
      crypt = nextCrypt;
      live.use(next);
      await previous.close?.();
      await ensureAdmins(next.Authenticator.admin_users);
    },
    close: async () => {
      clearInterval(prune);
      await pruneLease.stop();
      for (const s of follow) s.unsubscribe();
      await authenticator.close?.();
      h.stop();
      await h.flushActivity();
      await store.close();
    },
  };
});
