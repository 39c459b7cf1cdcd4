// `hub import-config`: the established hub's own example configurations (test/fixtures/jupyterhub-configs/, from
// its repository) and two of ours, loaded by jupyterhub 6.1.1's traitlets in the venv the set-up makes, become
// configs that start this hub (GET /hub/api answers) or, for an engine this test does not run, pass everything
// `hub start` checks but the engine's socket. The report names every Python callable with the lines the file
// gives it; what is not carried says COMPATIBILITY.md's reason; bad input writes nothing.
import test from 'ava';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compatibility } from '../../cli/compatibility.js';
import { planFor, TRANSFORMED_OPTIONS, type ImportReport } from '../../cli/import-config-map.js';
import { SCHEMA, validateConfig, type HubConfig } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { authenticatorProblems } from '../../services/auth/authenticators/index.js';
import { preflightSpawner } from '../../services/spawner/backends/index.js';
import { REPO, runHubCommand, startHub } from '../harness.js';

const FIXTURES = join(REPO, 'test', 'fixtures', 'jupyterhub-configs');
const dir = mkdtempSync(join(tmpdir(), 'hub-import-config-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

type Imported = { out: string; config: Record<string, Record<string, unknown>>; report: ImportReport };

async function importFixture(name: string, env: NodeJS.ProcessEnv = {}): Promise<Imported> {
  const out = join(dir, `${name}.json`);
  const r = await runHubCommand(['import-config', join(FIXTURES, `${name}.py`), '--out', out, '--json', '--force'], { env });
  if (r.code !== 0) throw new Error(`hub import-config ${name}: exit ${r.code}\n${r.stderr}`);
  const answer = JSON.parse(r.stdout) as Imported;
  if (JSON.stringify(JSON.parse(readFileSync(out, 'utf8'))) !== JSON.stringify(answer.config)) throw new Error('the file written is not the config reported');
  return answer;
}

/** The 1-based line of the fixture that starts with `text`: found in the text, not by the importer's own means. */
function lineOf(name: string, text: string): number {
  const lines = readFileSync(join(FIXTURES, `${name}.py`), 'utf8').split('\n');
  const i = lines.findIndex((l) => l.startsWith(text));
  if (i < 0) throw new Error(`${name}.py has no line starting ${JSON.stringify(text)}`);
  return i + 1;
}

/** Starts this hub on the imported config (on a free port: the file's own port is the established hub's 8000) and asks /hub/api. */
async function startsAndAnswers(t: import('ava').ExecutionContext, config: Record<string, Record<string, unknown>>) {
  const { port: _port, ...hubSection } = (config.Hub ?? {}) as Record<string, unknown>;
  const hub = await startHub({ config: { ...config, Hub: hubSection } });
  try {
    const base = String(hubSection.base_url ?? '/');
    const r = await fetch(`${hub.url}${base}hub/api`, { redirect: 'manual' });
    t.is(r.status, 200);
    t.is((await r.json() as { version: string }).version, '6.1.1');
  } finally {
    const stopped = await hub.stop();
    t.deepEqual(stopped.leftovers, []);
  }
}

/** What `hub start` checks before anything starts: the schema, the spawner backend's preflight, the authenticator's. */
async function startChecks(config: Record<string, Record<string, unknown>>): Promise<string[]> {
  const valid = validateConfig({ ...config, Hub: { ...config.Hub, data_dir: dir } }) as HubConfig;
  const log = createLogger('test', 'silent');
  return [...preflightSpawner(valid, log).problems, ...await authenticatorProblems(valid, log)];
}

const callable = (report: ImportReport, option: string) => report.callables.find((c) => c.option === option);

test('import-config: every option COMPATIBILITY.md marks ✓ is copied to an option of the same name here, and values change form only on ≈ rows', (t) => {
  const rows = [...compatibility().options.values()];
  t.true(rows.length > 250, 'the page is read');
  const schema = SCHEMA as unknown as Record<string, Record<string, unknown>>;
  for (const row of rows) {
    const plan = planFor(row);
    if (row.mark === '✓') t.true(plan.how === 'copy' && Boolean(schema[plan.target.split('.')[0]]?.[plan.target.split('.')[1]]), `${row.key} ✓ has no option ${JSON.stringify(plan)} here`);
    if (plan.how === 'rename' || plan.how === 'same name') t.truthy(schema[plan.target.split('.')[0]]?.[plan.target.split('.')[1]], `${row.key}: ${plan.target} is no option here`);
    if (row.mark === '✗') t.is(plan.how, 'not carried', row.key);
  }
  for (const key of TRANSFORMED_OPTIONS()) t.is(compatibility().options.get(key)?.mark, '≈', `${key}: the importer changes its value, so COMPATIBILITY.md must mark it ≈`);
});

test.serial('import-config: jupyterhub testing/jupyterhub_config.py (dummy, simple, bind_url, tornado_settings) starts this hub', async (t) => {
  const { config, report } = await importFixture('testing');
  t.like(config.Hub, { authenticator_class: 'dummy', spawner_class: 'simple', ip: '127.0.0.1', port: 8000, allow_named_servers: true });
  t.deepEqual(config.Spawner.slow_spawn_timeout, 0);
  t.deepEqual(config.Authenticator, { admin_users: ['admin'], allow_all: true });
  t.is(report.unmapped.find((u) => u.option === 'JupyterHub.default_url')?.why, compatibility().options.get('JupyterHub.default_url')!.note);
  t.is(report.unmapped.find((u) => u.option === 'JupyterHub.default_url')?.line, lineOf('testing', 'c.JupyterHub.default_url'));
  await startsAndAnswers(t, config);
});

test.serial('import-config: jupyterhub examples/service-whoami (services with commands, roles) starts this hub', async (t) => {
  const { config } = await importFixture('service-whoami');
  const services = config.Hub.services as { name: string; url: string; command: string[] }[];
  t.deepEqual(services.map((s) => [s.name, s.url]), [['whoami-api', 'http://127.0.0.1:10101'], ['whoami-oauth', 'http://127.0.0.1:10102']]);
  t.regex(services[0].command[0], /\.cache\/jupyter-6\.1\/bin\/python/, 'sys.executable is the loader\'s Python, as it was the established hub\'s');
  t.deepEqual(config.Hub.load_roles, [{ name: 'user', scopes: ['access:services', 'self'] }]);
  await startsAndAnswers(t, config);
});

test.serial('import-config: jupyterhub examples/external-oauth (an OAuth client service, a DummyAuthenticator class, PAM\'s absence: LocalProcessSpawner by default) starts this hub', async (t) => {
  const token = 'c0ffee'.repeat(8);
  const { config, report } = await importFixture('external-oauth', { JUPYTERHUB_API_TOKEN: token });
  t.deepEqual(config.Hub.services, [{ name: 'external-oauth', oauth_client_id: 'service-oauth-client-test', api_token: token, oauth_redirect_uri: 'http://127.0.0.1:5555/oauth_callback' }]);
  t.is(config.Hub.authenticator_class, 'dummy');
  t.is(config.Hub.spawner_class, 'localprocess', 'the established default spawner');
  t.true(report.defaults.some((d) => d.to === 'Hub.spawner_class'));
  await startsAndAnswers(t, config);
});

test.serial('import-config: jupyterhub examples/spawn-form (a LocalProcessSpawner subclass written in the file) maps to localprocess and lists each method with its line', async (t) => {
  const { config, report } = await importFixture('spawn-form');
  t.is(config.Hub.spawner_class, 'localprocess');
  t.is(config.Hub.authenticator_class, 'pam', 'the established default authenticator');
  for (const method of ['_options_form_default', 'options_from_form', 'get_args', 'get_env']) {
    const c = callable(report, `DemoFormSpawner.${method}`);
    t.truthy(c, method);
    t.is(c?.defined?.line, lineOf('spawn-form', `    def ${method}(`));
    t.is(c?.line, lineOf('spawn-form', 'c.JupyterHub.spawner_class = DemoFormSpawner'));
  }
  await startsAndAnswers(t, config);
});

test.serial('import-config: our own oauthenticator config (class imported, hooks, subdomains, base_url, a callable in environment) starts this hub', async (t) => {
  const { config, report } = await importFixture('own-oauth');
  t.like(config.Hub, { authenticator_class: 'oauth', spawner_class: 'simple', cookie_secret: '5f'.repeat(32), public_url: 'https://hub.example.org' });
  t.like(config.OAuthenticator, {
    client_id: 'hub-at-example', authorize_url: 'https://id.example.org/oauth2/authorize', auth_state_groups_key: 'groups',
    token_endpoint_auth_method: 'client_secret_basic', allowed_groups: ['staff', 'students'], admin_groups: ['staff'],
  });
  t.deepEqual(config.Spawner.environment, { COURSE: 'physics-101' });
  t.is(config.LDAPAuthenticator, undefined, 'options of an authenticator the file does not choose are not carried');
  const expected: [string, string, string][] = [
    ['JupyterHub.subdomain_hook', 'c.JupyterHub.subdomain_hook', 'def subdomain_for('],
    ['JupyterHub.named_server_limit_per_user', 'c.JupyterHub.named_server_limit_per_user', 'def servers_allowed('],
    ['GenericOAuthenticator.modify_auth_state_hook', 'c.GenericOAuthenticator.modify_auth_state_hook', 'c.GenericOAuthenticator.modify_auth_state_hook'],
    ['Authenticator.post_auth_hook', 'c.Authenticator.post_auth_hook', 'async def add_email('],
    ['Spawner.environment["GREETING"]', 'c.Spawner.environment', '    "GREETING"'],
  ];
  for (const [option, set, defined] of expected) {
    const c = callable(report, option);
    t.is(c?.line, lineOf('own-oauth', set), option);
    t.is(c?.defined?.line, lineOf('own-oauth', defined), option);
  }
  t.is(callable(report, 'Authenticator.post_auth_hook')?.why, compatibility().options.get('Authenticator.post_auth_hook')!.note);
  const tokenParams = compatibility().options.get('OAuthenticator.token_params')!;
  t.is(report.unmapped.find((u) => u.option === 'GenericOAuthenticator.token_params')?.why, tokenParams.note);
  // subdomain_host: as COMPATIBILITY.md says today, carried to Hub.subdomain_host or not carried with its reason
  const subdomainHost = compatibility().options.get('JupyterHub.subdomain_host')!;
  if (subdomainHost.mark === '✗') t.is(report.unmapped.find((u) => u.option === 'JupyterHub.subdomain_host')?.why, subdomainHost.note);
  else t.is(config.Hub.subdomain_host, 'https://hub.example.org');
  // base_url: as COMPATIBILITY.md says today, carried to Hub.base_url or not carried with its reason
  const baseUrl = compatibility().options.get('JupyterHub.base_url')!;
  if (baseUrl.mark === '✗') t.is(report.unmapped.find((u) => u.option === 'JupyterHub.base_url')?.why, baseUrl.note);
  else t.is(config.Hub.base_url, '/jupyter/');
  await startsAndAnswers(t, config);
});

test.serial('import-config: our own ldapauthenticator config (named by string, tls_kwargs, an options form and hooks) starts this hub', async (t) => {
  const { config, report } = await importFixture('own-ldap');
  t.like(config.Hub, { authenticator_class: 'ldap', spawner_class: 'simple', log_level: 'debug' });
  t.deepEqual(config.LDAPAuthenticator, {
    server_address: 'ldap.example.org', tls_strategy: 'on_connect', tls_kwargs: { ca_certs_file: '/etc/ssl/certs/ca-certificates.crt', validate: 'CERT_REQUIRED' },
    bind_dn_template: ['uid={username},ou=people,dc=example,dc=org'], allowed_groups: ['cn=hub-users,ou=groups,dc=example,dc=org'], use_lookup_dn_username: false,
  });
  t.deepEqual(config.Spawner.environment, { TEAM: 'physics' }, 'c.Spawner.environment.update(...) on an option never assigned');
  t.is(report.unmapped.find((u) => u.option === 'LDAPAuthenticator.group_attributes')?.why, compatibility().options.get('LDAPAuthenticator.group_attributes')!.note);
  for (const [option, defined] of [['Spawner.options_form', 'def options_form('], ['Spawner.options_from_form', 'c.Spawner.options_from_form'], ['Spawner.pre_spawn_hook', 'def before_start('], ['Spawner.auth_state_hook', 'c.Spawner.auth_state_hook']]) {
    const c = callable(report, option);
    t.is(c?.line, lineOf('own-ldap', `c.${option} =`), option);
    t.is(c?.defined?.line, lineOf('own-ldap', defined), option);
  }
  const hub = await runHubCommand(['import-config', join(FIXTURES, 'own-ldap.py'), '--out', join(dir, 'own-ldap-text.json')]);
  t.is(hub.code, 0, hub.stderr);
  t.regex(hub.stdout, new RegExp(`Spawner\\.pre_spawn_hook +before_start, set at own-ldap\\.py:${lineOf('own-ldap', 'c.Spawner.pre_spawn_hook')}, defined at own-ldap\\.py:${lineOf('own-ldap', 'def before_start(')}: no Python hooks`), 'the report a person reads');
  await startsAndAnswers(t, config);
});

test('import-config: jupyterhub examples/bootstrap-script (DockerSpawner by name, spawner hooks) passes every check of `hub start` but the engine\'s socket', async (t) => {
  const { config, report } = await importFixture('bootstrap-script');
  t.like(config.Hub, { spawner_class: 'docker', authenticator_class: 'pam' });
  t.deepEqual(config.DockerSpawner, { volumes: { '/volumes/jupyterhub/{username}/': '/home/jovyan/work' }, cmd_from_image: true, image: 'quay.io/jupyterhub/singleuser:latest', remove: false });
  for (const [option, set, defined] of [['Spawner.pre_spawn_hook', 'c.Spawner.pre_spawn_hook', 'def create_dir_hook('], ['Spawner.post_stop_hook', 'c.Spawner.post_stop_hook', 'def clean_dir_hook(']]) {
    t.is(callable(report, option)?.line, lineOf('bootstrap-script', set));
    t.is(callable(report, option)?.defined?.line, lineOf('bootstrap-script', defined));
  }
  t.is(report.unmapped.find((u) => u.option === 'DockerSpawner.container_ip')?.why, compatibility().options.get('DockerSpawner.container_ip')!.note);
  const problems = await startChecks(config);
  t.deepEqual(problems.filter((p) => !p.startsWith('DockerSpawner.host')), [], 'only the engine (no Docker or Podman here) stands between it and a start');
});

test('import-config: jupyterhub examples/user-sharing: options this hub fixes are not carried, with COMPATIBILITY.md\'s reason and line', async (t) => {
  const { config, report } = await importFixture('user-sharing');
  t.deepEqual(config.Authenticator, { allowed_users: ['shared-with', 'sharer'] });
  for (const option of ['Spawner.oauth_client_allowed_scopes', 'Spawner.server_token_scopes']) {
    t.deepEqual(report.unmapped.find((u) => u.option === option), { option, line: lineOf('user-sharing', `c.${option}`), why: compatibility().options.get(option)!.note });
  }
  t.deepEqual(await startChecks(config), []);
});

test('import-config: the written file is readable only by its owner (it may hold secrets) and is never written over without --force', async (t) => {
  const { out } = await importFixture('own-oauth');
  t.is(statSync(out).mode & 0o777, 0o600);
  writeFileSync(out, 'mine');
  const r = await runHubCommand(['import-config', join(FIXTURES, 'own-oauth.py'), '--out', out]);
  t.is(r.code, 1);
  t.regex(r.stderr, /exists: give another --out, or --force/);
  t.is(readFileSync(out, 'utf8'), 'mine');
});

/** The problems `hub start` would stop at, but the one about Kubernetes credentials (no cluster runs for this test). */
async function startChecksButCredentials(t: import('ava').ExecutionContext, config: Record<string, Record<string, unknown>>): Promise<string[]> {
  const problems = await startChecks(config);
  const credentials = problems.filter((p) => p.startsWith('Hub.spawner_class is "kubernetes": '));
  t.true(credentials.length <= 1, 'at most the one problem of credentials');
  return problems.filter((p) => !credentials.includes(p));
}

test('import-config: a zero-to-jupyterhub hub config (KubeSpawner: resources, home claims, scheduling, profiles, the culler, a client model) passes every check of `hub start` but the cluster\'s credentials', async (t) => {
  const { config, report } = await importFixture('own-z2jh');
  t.like(config.Hub, { spawner_class: 'kubernetes', authenticator_class: 'dummy', allow_named_servers: true, cleanup_servers: false, db_url: 'sqlite' });
  t.deepEqual(config.Spawner, { slow_spawn_timeout: 0, start_timeout: 300, cmd: ['jupyterhub-singleuser'], default_url: '/lab' }, 'c.KubeSpawner.start_timeout is Spawner\'s option here');
  const home = 'volume-{user_server}';
  t.like(config.KubeSpawner, {
    image: 'quay.io/jupyterhub/k8s-singleuser-sample:4.2.0', image_pull_policy: 'IfNotPresent', namespace: 'jhub',
    mem_limit: '2G', mem_guarantee: '1G', cpu_limit: 2, cpu_guarantee: 0.5, uid: 1000, fs_gid: 100, service_account: 'jupyter-user',
    storage_pvc_ensure: true, pvc_name_template: 'claim-{user_server}', storage_class: 'standard-rwo', storage_capacity: '10Gi', storage_access_modes: ['ReadWriteOnce'],
    node_selector: { 'cloud.google.com/gke-nodepool': 'user-pool' }, extra_labels: { 'hub.jupyter.org/network-access-hub': 'true' },
    scheduler_name: 'user-scheduler', allow_privilege_escalation: false,
    hub_connect_url: 'http://hub:8000',
  });
  t.deepEqual(config.KubeSpawner.volumes, { [home]: { name: home, persistentVolumeClaim: { claimName: '{pvc_name}' } } });
  t.deepEqual(config.KubeSpawner.volume_mounts, { [home]: { mountPath: '/home/jovyan', name: home, subPath: null } });
  t.deepEqual((config.KubeSpawner.tolerations as { key: string }[]).map((x) => x.key), ['hub.jupyter.org/dedicated', 'hub.jupyter.org_dedicated']);
  t.deepEqual(config.KubeSpawner.init_containers, [{
    name: 'block-cloud-metadata', image: 'quay.io/jupyterhub/k8s-network-tools:4.2.0',
    command: ['iptables', '--append', 'OUTPUT', '--protocol', 'tcp', '--destination', '169.254.169.254', '--destination-port', '80', '--jump', 'DROP'],
    securityContext: { privileged: true, runAsUser: 0, capabilities: { add: ['NET_ADMIN'] } }, resources: {},
  }], 'a kubernetes_asyncio V1Container as Kubernetes\' JSON');
  t.deepEqual(config.KubeSpawner.node_affinity_preferred, [{ weight: 100, preference: { matchExpressions: [{ key: 'hub.jupyter.org/node-purpose', operator: 'In', values: ['user'] }] } }], '.append() on an option never assigned');
  const profiles = config.KubeSpawner.profile_list as { display_name: string; kubespawner_override?: Record<string, unknown>; profile_options?: Record<string, { choices: Record<string, { kubespawner_override: Record<string, unknown> }> }> }[];
  t.deepEqual(profiles.map((p) => p.display_name), ['Python (default)', 'Data science']);
  t.deepEqual(profiles[1].kubespawner_override, { image: 'quay.io/jupyter/datascience-notebook:2024-10-07', cpu_limit: 4, mem_limit: '8G', mem_guarantee: '4G', default_url: '/lab' });
  t.deepEqual(profiles[1].profile_options?.gpu.choices.t4.kubespawner_override.extra_resource_limits, { 'nvidia.com/gpu': '1' });
  t.is(report.mapped.find((m) => m.option === 'JupyterHub.spawner_class')?.note, 'kubespawner.KubeSpawner → "kubernetes"');
  t.regex(report.mapped.find((m) => m.option === 'JupyterHub.hub_connect_url')?.note ?? '', /the port made this hub's \(8000\)/);
  for (const [option, row] of [['KubeSpawner.common_labels', 'KubeSpawner.common_labels'], ['Spawner.consecutive_failure_limit', 'Spawner.consecutive_failure_limit'], ['JupyterHub.hub_bind_url', 'JupyterHub.hub_bind_url']]) {
    t.deepEqual(report.unmapped.find((u) => u.option === option), { option, line: lineOf('own-z2jh', option === 'KubeSpawner.common_labels' ? 'common_labels = c.KubeSpawner.common_labels' : `c.${option}`), why: compatibility().options.get(row)!.note }, option);
  }
  t.deepEqual(report.defaults.map((d) => d.to), ['Hub.env_prefix_aliases'], 'the file gives the image and the command');
  t.deepEqual(await startChecksButCredentials(t, config), []);
});

test('import-config: a KubeSpawner subclass written in the file, the entry point name, a callable profile_list and overrides this hub has no option for', async (t) => {
  const { config, report } = await importSource('kube-subclass', [
    'from kubespawner import KubeSpawner',
    'class CourseSpawner(KubeSpawner):',
    '    def start(self):',
    '        return super().start()',
    'c.JupyterHub.spawner_class = CourseSpawner',
    'c.JupyterHub.authenticator_class = "dummy"',
    'c.JupyterHub.port = 8100',
    'c.JupyterHub.hub_connect_ip = "10.0.0.5"',
    'c.CourseSpawner.start_timeout = 120',
    'c.CourseSpawner.image = "registry.example.org/course:3"',
    'c.KubeSpawner.delete_stopped_pods = False',
    'c.KubeSpawner.k8s_api_request_timeout = 10',
    'c.KubeSpawner.modify_pod_hook = lambda spawner, pod: pod',
    'c.DockerSpawner.image = "ignored"',
    'def profiles(spawner):',
    '    return []',
    'c.KubeSpawner.profile_list = profiles',
    '',
  ].join('\n'));
  t.is(config.Hub.spawner_class, 'kubernetes');
  t.is(config.Spawner.start_timeout, 120, 'a subclass of a companion\'s class inherits Spawner\'s options');
  t.deepEqual(config.KubeSpawner, { image: 'registry.example.org/course:3', k8s_api_request_timeout: 10, hub_connect_url: 'http://10.0.0.5:8100', cmd: [] });
  t.true(report.defaults.some((d) => d.to === 'KubeSpawner.cmd'), 'KubeSpawner runs the image\'s own command by default');
  t.is(report.unmapped.find((u) => u.option === 'KubeSpawner.delete_stopped_pods')?.why, compatibility().options.get('KubeSpawner.delete_stopped_pods')!.note);
  t.is(report.unmapped.find((u) => u.option === 'DockerSpawner.image')?.why, 'applies to DockerSpawner, and the file\'s spawner is CourseSpawner');
  t.deepEqual(callable(report, 'KubeSpawner.profile_list'), { option: 'KubeSpawner.profile_list', name: 'profiles', line: 17, defined: { file: join(dir, 'kube-subclass.py'), line: 15 }, why: `this hub takes no Python here: ${compatibility().options.get('KubeSpawner.profile_list')!.note}` });
  t.is(callable(report, 'KubeSpawner.modify_pod_hook')?.why, compatibility().options.get('KubeSpawner.modify_pod_hook')!.note);
  t.is(callable(report, 'CourseSpawner.start')?.defined?.line, 3);
  t.deepEqual(await startChecksButCredentials(t, config), []);

  // by its entry point name; a profile's override of an option this hub does not have is left out with its reason
  const named = await importSource('kube-named', [
    'c.JupyterHub.spawner_class = "kubespawner"',
    'c.KubeSpawner.profile_list = [',
    '    {"display_name": "Small", "kubespawner_override": {"cpu_limit": 1, "delete_stopped_pods": False}},',
    '    {"display_name": "Big", "profile_options": {"image": {"display_name": "Image", "unlisted_choice": {"enabled": True, "kubespawner_override": {"image": "{value}", "common_labels": {"a": "b"}}}}}},',
    ']',
    '',
  ].join('\n'));
  t.is(named.config.Hub.spawner_class, 'kubernetes');
  t.deepEqual(named.config.KubeSpawner.profile_list, [
    { display_name: 'Small', kubespawner_override: { cpu_limit: 1 } },
    { display_name: 'Big', profile_options: { image: { display_name: 'Image', unlisted_choice: { enabled: true, kubespawner_override: { image: '{value}' } } } } },
  ]);
  const note = named.report.mapped.find((m) => m.option === 'KubeSpawner.profile_list')?.note ?? '';
  t.true(note.includes(`kubespawner_override "delete_stopped_pods" left out of every profile: ${compatibility().options.get('KubeSpawner.delete_stopped_pods')!.note}`), note);
  t.true(note.includes(`kubespawner_override "common_labels" left out of every profile: ${compatibility().options.get('KubeSpawner.common_labels')!.note}`), note);
  t.deepEqual(await startChecksButCredentials(t, named.config), []);
});

/** Imports a config written here (for forms of values the example files do not show). */
async function importSource(name: string, source: string): Promise<Imported> {
  const file = join(dir, `${name}.py`);
  writeFileSync(file, source);
  const r = await runHubCommand(['import-config', file, '--out', join(dir, `${name}.json`), '--json', '--force']);
  if (r.code !== 0) throw new Error(`hub import-config ${name}: exit ${r.code}\n${r.stderr}`);
  return JSON.parse(r.stdout) as Imported;
}

test.serial('import-config: batchspawner by name: req_* options become sbatch options, hub_connect_ip this hub\'s API on the nodes, a Jinja script is not carried; the hub starts', async (t) => {
  const { config, report } = await importSource('slurm', [
    'c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"',
    'c.JupyterHub.authenticator_class = "dummy"',
    'c.JupyterHub.port = 8100',
    'c.JupyterHub.hub_connect_ip = "10.0.0.5"',
    'c.BatchSpawnerBase.req_partition = "gpu"',
    'c.SlurmSpawner.req_options = "--exclusive --requeue"',
    'c.SlurmSpawner.req_qos = "interactive"',
    'c.SlurmSpawner.req_nprocs = "4"',
    'c.SlurmSpawner.batch_script = "#!/bin/bash\\n{{cmd}}\\n"',
    'c.Spawner.mem_limit = None',
    '',
  ].join('\n'));
  t.like(config.Hub, { spawner_class: 'slurm', port: 8100 });
  t.deepEqual(config.SlurmSpawner, { hub_api_url: 'http://10.0.0.5:8100/hub/api', partition: 'gpu', req_options: ['--exclusive', '--requeue', '--qos=interactive'], req_nprocs: 4 });
  t.regex(report.unmapped.find((u) => u.option === 'SlurmSpawner.batch_script')?.why ?? '', /no Jinja/);
  t.deepEqual(report.mapped.find((m) => m.option === 'Spawner.mem_limit'), { option: 'Spawner.mem_limit', line: 10, to: [], note: 'None: this hub\'s default applies' });
  await startsAndAnswers(t, config);
});

test('import-config: what this hub refuses is left out with its problem, services take their tokens from service_tokens, and the file still loads', async (t) => {
  const { config, report } = await importSource('refused', [
    'c.JupyterHub.authenticator_class = "dummy"',
    'c.JupyterHub.spawner_class = "simple"',
    'c.JupyterHub.tornado_settings = {"headers": {"Content-Type": "text/plain"}, "slow_stop_timeout": 3, "xsrf_cookies": True}',
    'c.JupyterHub.services = [{"name": "announcer", "url": "http://127.0.0.1:9999", "timeout": 30, "team_channel": "#ops"}]',
    'c.JupyterHub.service_tokens = {"0123456789abcdef": "announcer"}',
    'c.Application.log_level = 30',
    '',
  ].join('\n'));
  // timeout is a service key here too; a key this hub has no use for is named and left out
  t.deepEqual(config.Hub.services, [{ name: 'announcer', url: 'http://127.0.0.1:9999', timeout: 30, api_token: '0123456789abcdef' }]);
  t.regex(report.mapped.find((m) => m.option === 'JupyterHub.services')?.note ?? '', /left out of each service: team_channel/);
  t.is(config.Hub.extra_headers, undefined);
  t.is(config.Spawner.slow_stop_timeout, 3);
  t.is(config.Hub.log_level, 'warn');
  t.regex(report.unmapped.find((u) => u.option === 'JupyterHub.tornado_settings')?.why ?? '', /^not accepted here: Hub\.extra_headers: Content-Type is set by the hub/);
  t.regex(report.mapped.find((m) => m.option === 'JupyterHub.tornado_settings')?.note ?? '', /not carried: xsrf_cookies/, 'what it could carry stays carried');
  t.deepEqual(await startChecks(config), []);
});

const badInput: [string, string, RegExp][] = [
  ['syntax', 'c = get_config()\nc.JupyterHub.port = 8000\nc.Spawner.cmd = [\n', /, line 3: Python syntax error: '\[' was never closed; nothing written/],
  ['unknown-class', 'c.JupyterHub.port = 8000\nc.JupyterHub.spawner_class = "mycompany.spawners.MySpawner"\n', /JupyterHub\.spawner_class \(line 2\): mycompany\.spawners\.MySpawner is not a class this hub knows/],
  ['unsupported-class', 'c.JupyterHub.spawner_class = "dockerspawner.SwarmSpawner"\n', /JupyterHub\.spawner_class \(line 1\): dockerspawner\.SwarmSpawner is not supported here: only the five built in \(COMPATIBILITY\.md\)/],
  ['raises', 'import os\nc.JupyterHub.port = int(os.environ["NO_SUCH_VARIABLE_HERE"])\n', /, line 2: loading the file raised KeyError: 'NO_SUCH_VARIABLE_HERE'; nothing written/],
];
for (const [name, source, message] of badInput) {
  test(`import-config: bad input (${name}) is one line, exit code 1, and nothing is written`, async (t) => {
    const file = join(dir, `${name}.py`);
    writeFileSync(file, source);
    const out = join(dir, `${name}-out.json`);
    const r = await runHubCommand(['import-config', file, '--out', out]);
    t.is(r.code, 1, r.stderr);
    t.regex(r.stderr, message);
    t.false(existsSync(out));
  });
}

test('import-config: a missing file is named and nothing is written', async (t) => {
  const out = join(dir, 'missing-out.json');
  const r = await runHubCommand(['import-config', join(dir, 'no-such-config.py'), '--out', out]);
  t.is(r.code, 1);
  t.regex(r.stderr, /no-such-config\.py: no such file; nothing written/);
  t.false(existsSync(out));
});

test('import-config: companion packages are never imported and classes never instantiated, even when installed', async (t) => {
  // a "dockerspawner" that would leave a mark if its code ran, on the loader's PYTHONPATH
  const site = join(dir, 'site');
  mkdirSync(join(site, 'dockerspawner'), { recursive: true });
  const marks = join(dir, 'marks');
  mkdirSync(marks);
  writeFileSync(join(site, 'dockerspawner', '__init__.py'), `open(${JSON.stringify(join(marks, 'imported'))}, "w").close()\nclass DockerSpawner: pass\n`);
  const file = join(dir, 'instantiate.py');
  writeFileSync(file, [
    'from dockerspawner import DockerSpawner',
    'from jupyterhub.spawner import LocalProcessSpawner',
    'class Marking(LocalProcessSpawner):',
    '    def __init__(self, *args, **kwargs):',
    `        open(${JSON.stringify(join(marks, 'instantiated'))}, "w").close()`,
    '        super().__init__(*args, **kwargs)',
    'c.JupyterHub.spawner_class = Marking',
    'c.DockerSpawner.image = "ignored"',
    '',
  ].join('\n'));
  const r = await runHubCommand(['import-config', file, '--out', join(dir, 'instantiate.json'), '--json'], { env: { PYTHONPATH: site } });
  t.is(r.code, 0, r.stderr);
  t.deepEqual(readdirSync(marks), [], 'nothing of the companion package or of the class ran');
  const { report } = JSON.parse(r.stdout) as Imported;
  t.is(callable(report, 'Marking.__init__')?.defined?.line, 4);
});
