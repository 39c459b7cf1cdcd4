// The auth actor: users, groups (and, later, login sessions). Wiring only.
import { join } from 'node:path';
import { runActor } from '../../shared/actor.js';
import { encodeJson } from '../../shared/nats.js';
import { subjects } from '../../shared/subjects.js';
import { createAuthHandlers } from './handlers.js';
import { AuthStore } from './store.js';

await runActor('auth', async (ctx) => {
  const store = await AuthStore.open(join(ctx.config.Hub.data_dir, 'auth.sqlite'));
  const h = createAuthHandlers({
    store,
    audit: ctx.audit,
    announce: (entity, change, body) => ctx.nc.publish(subjects.event(entity, change), encodeJson(body)),
    activityFlushMs: Math.max(1000, ctx.config.Hub.activity_resolution * 1000),
  });

  // Configured admins exist and are admins from the first start on.
  for (const name of ctx.config.Authenticator.admin_users) {
    const existing = await h.getUsers({ names: [name] });
    if (!existing.users.length) await h.createUser({ name, admin: true, by: 'config' });
    else if (!existing.users[0].admin) await h.updateUser({ name, admin: true, by: 'config' });
  }

  return {
    grpc: {
      GetUser: h.getUser, GetUsers: h.getUsers, ListUsers: h.listUsers, CreateUsers: h.createUsers, CreateUser: h.createUser,
      UpdateUser: h.updateUser, DeleteUser: h.deleteUser, RecordActivity: h.recordActivity,
      GetGroup: h.getGroup, ListGroups: h.listGroups, CreateGroups: h.createGroups, DeleteGroup: h.deleteGroup,
      ChangeGroupMembers: h.changeGroupMembers, SetGroupProperties: h.setGroupProperties,
    },
    close: async () => {
      h.stop();
      await h.flushActivity();
      await store.close();
    },
  };
});
