// `?token=` on API requests: the seed's contract accepts it, and so does this hub by default; Hub.allow_token_in_url
// false gives the established hub 5.0+'s rule (its API reads only the Authorization header). Either way the header
// works, and a server or service behind the hub ignores ?token= unless its HUB_ALLOW_TOKEN_IN_URL says otherwise
// (test/oauth: the client library's rule).
import test from 'ava';
import { startHub, type HubUnderTest } from '../harness.js';
import { randomToken } from './client.js';

const TOKEN = randomToken();
const get = (hub: HubUnderTest, path: string, headers: Record<string, string> = {}) => fetch(`${hub.url}/hub/api${path}`, { headers, signal: AbortSignal.timeout(15_000) });

for (const [label, allow] of [['by default (the seed)', undefined], ['with Hub.allow_token_in_url false', false]] as const) {
  test.serial(`token in url: ${label}`, async (t) => {
    const hub = await startHub({ config: { Hub: { api_tokens: { [TOKEN]: 'ann' }, ...(allow === undefined ? {} : { allow_token_in_url: allow }) } } });
    try {
      const inUrl = await get(hub, `/user?token=${TOKEN}`);
      if (allow === false) {
        t.is(inUrl.status, 403, 'the token in the URL is not read: the request is anonymous');
        t.like(await inUrl.json(), { status: 403 });
      } else {
        t.is(inUrl.status, 200);
        t.like(await inUrl.json(), { kind: 'user', name: 'ann' });
      }
      const header = await get(hub, '/user', { authorization: `token ${TOKEN}` });
      t.is(header.status, 200);
      t.like(await header.json(), { name: 'ann' });
    } finally {
      await hub.stop();
    }
  });
}
