// The auth actor's user operations the verbs need, reached the one way that is right at the moment: over gRPC
// while a hub runs on the data dir, through the actor's own handlers on its store while none does.
import type { HubConfig } from '../shared/config.js';
import { actorClient, runningHub } from './hub.js';
import { offlineNote, openOffline } from './offline.js';

export interface UserOps {
  getUser(r: { name: string }): Promise<unknown>;
  createUser(r: { name: string; admin: boolean; by: string }): Promise<unknown>;
  setPassword(r: { name: string; password: string; by: string }): Promise<unknown>;
  deleteUser(r: { name: string; by: string }): Promise<unknown>;
}

/**
 * Runs `use` with the user operations and the rules in force (a running hub's resolved configuration, else
 * the command line's). Stores opened for it are closed afterwards.
 */
export async function withUsers<T>(config: HubConfig, use: (ops: UserOps, rules: HubConfig) => Promise<T>): Promise<T> {
  const hub = runningHub(config);
  if (hub) {
    const auth = await actorClient(hub, 'auth');
    try {
      return await use({ getUser: auth.getUser, createUser: auth.createUser, setPassword: auth.setPassword, deleteUser: auth.deleteUser }, hub.config);
    } finally {
      auth.close();
    }
  }
  const offline = await openOffline(config);
  let result: T;
  try {
    const { users, login } = offline;
    result = await use({ getUser: users.getUser, createUser: users.createUser, setPassword: login.setPassword, deleteUser: users.deleteUser }, config);
  } finally {
    await offline.close();
  }
  process.stderr.write(offlineNote(config.Hub.data_dir));
  return result;
}
