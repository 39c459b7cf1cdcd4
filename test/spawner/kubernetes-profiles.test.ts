// KubeSpawner.profile_list through the hub on the real cluster (test/spawner/kube-cluster.ts): the spawn page offers
// the profile and its profile_options as KubeSpawner's form names them; a choice the profile does not offer, or a
// free-form value its pattern refuses, is a 400 page and starts nothing; a good choice starts the established hub's
// single-user server in a pod made with the profile's kubespawner_override and the choice's. Own namespace and hub.
import test from 'ava';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, field, formLogin } from '../auth/helpers.js';
import { serverRecord } from './helpers.js';
import { ensureCluster, type KubeCluster } from './kube-cluster.js';

const ADMIN = randomToken();
const NAMESPACE = `hub-prof-${Date.now().toString(36)}`;
let cluster: KubeCluster;
let hub: HubUnderTest;
/** A page's text as a person reads it (the hub escapes quotes as &#34; and &#39;). */
const text = (html: string) => html.replace(/&#34;|&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

test.before(async () => {
  cluster = await ensureCluster();
  await cluster.want('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }, 201);
  const port = await freePort();
  hub = await startHub({
    reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
    env: { KUBECONFIG: cluster.kubeconfig },
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'kubernetes', ip: '0.0.0.0', port, env_prefix_aliases: ['JUPYTERHUB_'], authenticator_class: 'dummy' },
      DummyAuthenticator: { password: 'pw' },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: ['jupyterhub-singleuser'], start_timeout: 120, http_timeout: 60, poll_interval: 1 },
      KubeSpawner: {
        image: 'localhost/hub-cluster/no-such-image:1', image_pull_policy: 'IfNotPresent', namespace: NAMESPACE,
        hub_connect_url: `http://${cluster.hostIp}:${port}`, extra_labels: { 'example.org/team': 'none', 'example.org/keep': 'yes' },
        profile_list: [
          { display_name: 'Plain', slug: 'plain', default: true },
          {
            display_name: 'Team', description: 'the team\'s image',
            kubespawner_override: { extra_labels: { 'example.org/team': 'blue' }, environment: { TEAM: 'blue {unescaped_username}' }, default_url: '/lab' },
            profile_options: {
              image: {
                display_name: 'Image',
                choices: {
                  lab: { display_name: 'JupyterLab', default: true, kubespawner_override: { image: cluster.image } },
                  old: { display_name: 'An old one', kubespawner_override: { image: 'localhost/hub-cluster/old:0' } },
                },
                unlisted_choice: { enabled: true, display_name: 'Your own image', validation_regex: '^localhost/.+:.+$', validation_message: 'Must be an image on this cluster', kubespawner_override: { image: '{value}' } },
              },
            },
          },
        ],
      },
    },
  });
});

test.after.always(async () => {
  await hub?.stop();
  if (cluster) await cluster.api('DELETE', `/api/v1/namespaces/${NAMESPACE}`).catch(() => undefined);
});

test.serial('kubernetes profiles: the spawn page offers profile_list and its options; a wrong choice is a 400 page; a good one starts a pod made with both overrides', async (t) => {
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'erin', 'pw')).status, 302);
  const form = await b.get(`${hub.url}/hub/spawn`);
  t.is(form.status, 200);
  t.regex(text(form.body), /<option value="team">Team — the team's image<\/option>/);
  t.regex(form.body, /<select name="profile-option-team--image"><option value="lab" selected>JupyterLab<\/option><option value="old">An old one<\/option><option value="unlisted-choice">Other…<\/option><\/select>/);
  t.regex(form.body, /<input name="profile-option-team--image--unlisted-choice" pattern="\^localhost\/\.\+:\.\+\$" title="Must be an image on this cluster">/);
  const xsrf = field(form.body, '_xsrf') ?? '';

  // mistakes a person (or a crafted form) can make: said on the page, nothing started
  const wrong = await b.post(`${hub.url}/hub/spawn/erin`, { _xsrf: xsrf, profile: 'team', 'profile-option-team--image': 'huge' });
  t.is(wrong.status, 400);
  t.regex(text(wrong.body), /Invalid choice "huge" for 'image' of profile 'team': choose one of lab, old/);
  const foreign = await b.post(`${hub.url}/hub/spawn/erin`, { _xsrf: xsrf, profile: 'team', 'profile-option-team--image': 'unlisted-choice', 'profile-option-team--image--unlisted-choice': 'docker.io/evil:1' });
  t.is(foreign.status, 400);
  t.regex(foreign.body, /Must be an image on this cluster/);
  t.is(await serverRecord(hub.natsUrl, 'erin'), null, 'nothing was started');

  // the good choice, by the form: the user options KubeSpawner's form would give, the pod both overrides make
  const started = await b.post(`${hub.url}/hub/spawn/erin`, { _xsrf: xsrf, profile: 'team', 'profile-option-team--image': 'lab', 'profile-option-team--image--unlisted-choice': '' });
  t.is(started.status, 302, started.body.slice(0, 500));
  const rec = await waitFor('erin running', async () => {
    const r = await serverRecord(hub.natsUrl, 'erin');
    if (r?.state === 'stopped') throw new Error(`erin's start failed: ${JSON.stringify(r.progress.at(-1))}`);
    return r?.state === 'running' ? r : undefined;
  }, 150_000, 250);
  t.deepEqual(rec.user_options, { profile: 'team', image: 'lab' });
  const pod = await cluster.want('GET', `/api/v1/namespaces/${NAMESPACE}/pods/jupyter-erin`, undefined, 200);
  t.is(pod.spec.containers[0].image, cluster.image);
  t.like(pod.metadata.labels, { 'example.org/team': 'blue', 'example.org/keep': 'yes', 'hub.jupyter.org/username': 'erin' });
  t.deepEqual(pod.spec.containers[0].env.find((e: { name: string }) => e.name === 'TEAM'), { name: 'TEAM', value: 'blue erin' });
  // default_url is a Spawner option: it reached the server's environment
  t.is(pod.spec.containers[0].env.find((e: { name: string }) => e.name === 'JUPYTERHUB_DEFAULT_URL')?.value, '/lab');

  const api = apiClient(hub.url);
  t.is((await api('DELETE', '/users/erin/server', { token: ADMIN })).status, 204);
  t.is((await cluster.api('GET', `/api/v1/namespaces/${NAMESPACE}/pods/jupyter-erin`)).status, 404);
});

test.serial('kubernetes profiles: through the API, a free-form value its pattern accepts is used; a choice not offered is a 400', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/finn', { token: ADMIN })).status, 201);
  const bad = await api('POST', '/users/finn/server', { token: ADMIN, body: { profile: 'team', image: 'nope' } });
  t.is(bad.status, 400);
  t.regex(bad.body.message, /Invalid choice "nope" for 'image' of profile 'team': choose one of lab, old/);
  // an image on this cluster, named freely: it runs
  const own = await api('POST', '/users/finn/server', { token: ADMIN, body: { profile: 'team', 'image--unlisted-choice': cluster.image } });
  t.true(own.status === 201 || own.status === 202, JSON.stringify(own.body));
  await waitFor('finn running', async () => {
    const r = await serverRecord(hub.natsUrl, 'finn');
    if (r?.state === 'stopped') throw new Error(`finn's start failed: ${JSON.stringify(r.progress.at(-1))}`);
    return r?.state === 'running' ? r : undefined;
  }, 150_000, 250);
  const pod = await cluster.want('GET', `/api/v1/namespaces/${NAMESPACE}/pods/jupyter-finn`, undefined, 200);
  t.is(pod.spec.containers[0].image, cluster.image);
  t.is((await api('DELETE', '/users/finn/server', { token: ADMIN })).status, 204);
});
