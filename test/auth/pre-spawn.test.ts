// Authenticator.refresh_pre_spawn: a login is re-checked with the identity provider before a server
// starts, even when auth_refresh_age has not passed; a login the provider no longer vouches for ends.
import test from 'ava';
import { FIXTURE } from '../spawner/helpers.js';
import { Browser, field, startHubWithIdp, submitProviderForm, whoami } from './helpers.js';

test('external: with refresh_pre_spawn a revoked login cannot start a server', async (t) => {
  const { hub, idp } = await startHubWithIdp({ dana: 'dana-pw-1' }, {
    // with oauth and no allow option only admins may log in (as the established hub 5): dana is allowed by name
    Authenticator: { auth_refresh_age: 3600, refresh_pre_spawn: true, allowed_users: ['dana'] },
    Spawner: { cmd: [process.execPath, FIXTURE] },
  });
  try {
    const b = new Browser();
    const start = await b.get(`${hub.url}/hub/oauth_login`);
    const back = await submitProviderForm(b, idp, await b.get(start.location!), 'dana', 'dana-pw-1');
    t.is((await b.get(back.location!)).status, 302);
    t.is((await whoami(b, hub.url)).status, 200);
    const home = await b.get(`${hub.url}/hub/home`);
    const xsrf = field(home.body, '_xsrf')!;
    t.is((await b.post(`${hub.url}/hub/spawn/dana`, { _xsrf: xsrf })).status, 302, 'a vouched-for login starts its server');
    t.is((await b.post(`${hub.url}/hub/stop/dana/`, { _xsrf: xsrf })).status, 302);
    t.true((await idp.revoke('dana')) > 0);
    const refused = await b.post(`${hub.url}/hub/spawn/dana`, { _xsrf: xsrf });
    t.is(refused.status, 403, 'the provider was asked before the spawn');
    t.is((await whoami(b, hub.url)).status, 403, 'and the login ended');
  } finally {
    await hub.stop();
    await idp.stop();
  }
});
