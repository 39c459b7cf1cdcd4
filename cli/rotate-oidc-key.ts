// `hub rotate-oidc-key`: the hub's next OpenID Connect signing key becomes the one it signs with (the old one stays
// published in the JWKS as the previous key, so id_tokens already out still verify). With a hub running, its oauth
// actor rotates (and audits it); without one, the key file in the data dir is rotated here.
import type { VerbInput } from './main.js';
import { actorClient, cliIdentity, runningHub } from './hub.js';
import { offlineNote } from './offline.js';
import { rotateSigningKey, storeKeySource } from '../services/oauth/signing-keys.js';
import { storeLocation, usesPostgres } from '../shared/store.js';

export async function rotateOidcKey({ config }: VerbInput): Promise<number> {
  const hub = runningHub(config);
  let out: { kid: string; previous_kid: string };
  if (hub) {
    const oauth = await actorClient(hub, 'oauth');
    try {
      out = await oauth.rotateSigningKey({ client_id: '', by: cliIdentity() });
    } finally {
      oauth.close();
    }
  } else if (usesPostgres(config.Hub.db_url)) {
    // the keys every node shares are a row of the oauth store
    const { OAuthStore } = await import('../services/oauth/store.js');
    const store = await OAuthStore.open(storeLocation(config.Hub, 'oauth'));
    try {
      out = await rotateSigningKey(storeKeySource(store));
    } finally {
      await store.close();
    }
    process.stderr.write(offlineNote(config.Hub.data_dir));
  } else {
    out = await rotateSigningKey(config.Hub.data_dir);
    process.stderr.write(offlineNote(config.Hub.data_dir));
  }
  process.stdout.write(`signing with key ${out.kid}${out.previous_kid ? ` (previous key ${out.previous_kid} still published)` : ''}\n`);
  return 0;
}
