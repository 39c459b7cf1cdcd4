// The auth actor: users, groups, logins (password, dummy, or an external identity provider) and their sessions. Wiring only.
import { join } from 'node:path';
import { runActor } from '../../shared/actor.js';
import { createAnnouncer } from '../../shared/nats.js';
import { createAuthHandlers, userEnsurer } from './handlers.js';
import { createExternalLogin, providerConfigProblems } from './external.js';
import { createLoginHandlers } from './login.js';
import { createFirstAdminSetup } from './setup.js';
import { AuthStore } from './store.js';

await runActor('auth', async (ctx) => {
  const store = await AuthStore.open(join(ctx.config.Hub.data_dir, 'auth.sqlite'));
  const h = createAuthHandlers({
    store,
    audit: ctx.audit,
    announce: createAnnouncer(ctx.nc),
    activityFlushMs: Math.max(1000, ctx.config.Hub.activity_resolution * 1000),
  });

  const ensureUser = userEnsurer(h);
  // With the external provider, a misconfigured section is fatal here and loud, not a broken login page later.
  const viaProvider = ctx.config.Hub.authenticator_class === 'oauth';
  const problems = viaProvider ? providerConfigProblems(ctx.config) : [];
  if (problems.length) throw new Error(`authenticator_class "oauth" needs: ${problems.join('; ')}`);
  const login = createLoginHandlers({
    config: ctx.config, store, audit: ctx.audit,
    announce: createAnnouncer(ctx.nc),
    ensureUser,
    // `external` is created just below; the closure runs only at refresh time
    recheck: viaProvider ? (s) => external.recheck(s) : undefined,
  });
  const external = createExternalLogin({ config: ctx.config, store, audit: ctx.audit, log: ctx.log, ensureUser, openSession: login.openSession });
  const prune = setInterval(() => void login.prune(), 600_000);
  prune.unref();

  // Configured admins exist and are admins from the first start on.
  for (const name of ctx.config.Authenticator.admin_users) {
    const existing = await h.getUsers({ names: [name] });
    if (!existing.users.length) await h.createUser({ name, admin: true, by: 'config' });
    else if (!existing.users[0].admin) await h.updateUser({ name, admin: true, by: 'config' });
  }

  const setup = await createFirstAdminSetup({
    config: ctx.config, store, audit: ctx.audit, log: ctx.log, ensureUser, setPassword: login.setPassword, getUser: h.getUser,
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
      GetGroup: h.getGroup, ListGroups: h.listGroups, CreateGroups: h.createGroups, DeleteGroup: h.deleteGroup,
      ChangeGroupMembers: h.changeGroupMembers, SetGroupProperties: h.setGroupProperties,
      Authenticate: login.authenticate, SetPassword: login.setPassword, CheckSession: login.checkSession,
      RevokeSession: login.revokeSession, RefreshUser: login.refreshUser,
      ExternalLoginUrl: external.loginUrl, CompleteExternalLogin: external.complete,
      SetupStatus: setup.setupStatus, CompleteSetup: setup.completeSetup,
    },
    close: async () => {
      clearInterval(prune);
      h.stop();
      await h.flushActivity();
      await store.close();
    },
  };
});
