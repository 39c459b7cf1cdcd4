// The command line works on any node: on a node that runs only a spawner and a gateway, `hub add-user` and `hub
// token` reach the auth and tokens actors of another node over NATS (as the operator), and what they did is seen
// through that node's gateway at once.
import test from 'ava';
import { join } from 'node:path';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { runHubCommand, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { nodeConfig, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();
const nodes: HubUnderTest[] = [];
test.after.always(async () => {
  for (const n of nodes.reverse()) await n.stop();
});

test.serial('cli on a node without auth or tokens: add-user and token go to the other node\'s actors', async (t) => {
  const shared = sharedConfig(ADMIN, FIXTURE);
  const a = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) });
  nodes.push(a);
  const b = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } }) });
  nodes.push(b);
  const onB = (args: string[], input?: string) => runHubCommand([...args, '--config', join(b.dataDir, 'hub.json')], { input });

  const added = await onB(['add-user', 'remote'], 'remote-password\n');
  t.is(added.code, 0, added.stderr);
  t.regex(added.stderr, /added user remote with a password/);
  t.notRegex(added.stderr, /no hub is running/, 'went through the running hub');
  t.is((await apiClient(b.url)('GET', '/users/remote', { token: ADMIN })).status, 200);
  const browser = new Browser();
  t.is((await formLogin(browser, b.url, 'remote', 'remote-password')).status, 302);
  t.is((await whoami(browser, b.url)).body.name, 'remote');

  const token = await onB(['token', 'remote']);
  t.is(token.code, 0, token.stderr);
  t.is((await apiClient(a.url)('GET', '/user', { token: token.stdout.trim() })).body.name, 'remote');
});
