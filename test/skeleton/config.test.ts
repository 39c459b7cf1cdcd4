import test from 'ava';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, validateConfig } from '../../shared/config.js';
import { runHubCommand } from '../harness.js';

test('config: defaults as documented', (t) => {
  const c = validateConfig({});
  t.is(c.Hub.ip, '127.0.0.1');
  t.is(c.Hub.port, 8000);
  t.is(c.Hub.nats_port, 4222);
  t.is(c.Hub.data_dir, './data');
  t.true(Object.isFrozen(c.Hub));
});

test('config: every problem is listed, each naming its key and what was expected', (t) => {
  const err = t.throws(() => validateConfig({ Hub: { port: 'eighty', bogus: 1 }, Nonsense: {} }), { instanceOf: ConfigError });
  t.is(err!.problems.length, 3);
  t.true(err!.problems.some((p) => p.startsWith('Hub.port: expected an integer between 1 and 65535')));
  t.true(err!.problems.some((p) => p.startsWith('Hub.bogus: unknown option')));
  t.true(err!.problems.some((p) => p.startsWith('Nonsense: unknown section')));
});

test('config: command-line overrides parse as JSON and win over the file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-cfg-'));
  const file = join(dir, 'c.json');
  writeFileSync(file, JSON.stringify({ Hub: { port: 9000, ip: '127.0.0.2' } }));
  const c = await loadConfig({ argv: ['--config', file, '--Hub.port=8001'], env: {}, cwd: dir });
  t.is(c.Hub.port, 8001);
  t.is(c.Hub.ip, '127.0.0.2');
  t.is(c.Hub.data_dir, join(dir, 'data'), 'a relative data_dir resolves against the working directory');
  rmSync(dir, { recursive: true });
});

test('config: a TypeScript module exporting the config is accepted', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-cfg-'));
  const file = join(dir, 'hub_config.ts');
  writeFileSync(file, 'const port: number = 8123;\nexport default { Hub: { port, data_dir: "' + join(dir, 'd') + '" } };\n');
  const r = await runHubCommand(['status', '--config', file]);
  t.is(r.code, 1, r.stderr);
  t.regex(r.stdout, /no hub is running with data dir .*\/d$/m);
  rmSync(dir, { recursive: true });
});

test('config: the hub refuses to start on an unknown key, naming it', async (t) => {
  const r = await runHubCommand(['--Hub.prot=8001']);
  t.is(r.code, 2);
  t.regex(r.stderr, /Hub\.prot: unknown option/);
});

test('config: the hub refuses to start on a wrong type, naming the key and the expected type', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-cfg-'));
  const file = join(dir, 'c.json');
  writeFileSync(file, JSON.stringify({ Hub: { port: '8000' }, Supervisor: { restart_intensity: 0 } }));
  const r = await runHubCommand(['--config', file]);
  t.is(r.code, 2);
  t.regex(r.stderr, /Hub\.port: expected an integer between 1 and 65535, got "8000"/);
  t.regex(r.stderr, /Supervisor\.restart_intensity: expected an integer >= 1, got 0/);
  rmSync(dir, { recursive: true });
});

test('cli: hub --help lists the subcommands', async (t) => {
  const r = await runHubCommand(['--help']);
  t.is(r.code, 0);
  for (const cmd of ['start', 'status', 'add-user', 'set-password', 'token', 'audit', 'help']) t.regex(r.stdout, new RegExp(`^  ${cmd} `, 'm'));
});
