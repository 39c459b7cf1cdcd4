// Authenticator.refresh_pre_spawn: a login is re-checked with the identity provider before a server
// starts, even when auth_refresh_age has not passed; a login the provider no longer vouches for ends.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { freePort, startHub } from '../harness.js';
import { randomToken } from '../api/client.js';
import { FIXTURE } from '../spawner/helpers.js';
import { Browser, field, startIdp, whoami } from './helpers.js';

test('external: with refresh_pre_spawn a revoked login cannot start a server', async (t) => {
  const port = await freePort();
  const secret = `idp-secret-${randomToken()}`;
  const idp = await startIdp({
    IDP_USERS: JSON.stringify({ dana: 'dana-pw-1' }), IDP_CLIENT_ID: 'hub-at-idp', IDP_CLIENT_SECRET: secret,
    IDP_REDIRECT_URI: `http://127.0.0.1:${port}/hub/oauth_callback`, IDP_TOKEN_TTL: '3600',
  });
  const hub = await startHub({
    reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
    config: {
      Hub: { authenticator_class: 'oauth' },
      Authenticator: { auth_refresh_age: 3600, refresh_pre_spawn: true },
      OAuthenticator: { authorize_url: `${idp.url}/authorize`, token_url: `${idp.url}/token`, userdata_url: `${idp.url}/userinfo`, client_id: 'hub-at-idp', client_secret: secret },
      Spawner: { cmd: [process.execPath, FIXTURE] },
    },
  });
  try {
    const b = new Browser();
    const start = await b.get(`${hub.url}/hub/oauth_login`);
    const form = await b.get(start.location!);
    const fields = Object.fromEntries(['client_id', 'redirect_uri', 'response_type', 'scope', 'state', 'code_challenge', 'code_challenge_method']
      .map((k) => [k, field(form.body, k) ?? '']).filter(([, v]) => v));
    const back = await b.post(`${idp.url}/authorize`, { ...fields, username: 'dana', password: 'dana-pw-1', action: 'login' });
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
