// The slurm backend's configuration and job script, without a cluster: what an operator gets wrong is refused
// at start with one line each; the script holds the options and never the server's secrets.
import test from 'ava';
import { ConfigError, SCHEMA, validateConfig } from '../../shared/config.js';
import { describeJobEnd, preflight, renderBatchScript, shellQuote } from '../../services/spawner/backends/slurm.js';
import { createLogger } from '../../shared/log.js';

const problems = (SlurmSpawner: Record<string, unknown>) => {
  try {
    validateConfig({ Hub: { spawner_class: 'slurm' }, SlurmSpawner });
    return [];
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return e.problems;
  }
};

test('slurm config: bad options are refused with one line each', (t) => {
  t.deepEqual(problems({}), []);
  const lines = problems({
    batch_script: '#!/bin/sh\n#SBATCH --account={account}\nrun it\n', partition: 'a b', req_memory: 'lots', req_runtime: 'forever',
    req_options: ['--gres=gpu:1', 'not an option', '--qos=x\n#SBATCH --uid=0'], hub_api_url: 'http://hub:8000/', server_ip: 'anywhere', sbatch: [],
  });
  for (const want of [/batch_script: must contain \{cmd\}/, /batch_script: unknown placeholder \{account\}/, /partition: "a b"/, /req_memory: "lots"/,
    /req_runtime: "forever"/, /req_options: "not an option"/, /req_options: "--qos=x\\n#SBATCH --uid=0"/, /hub_api_url/, /server_ip: "anywhere"/, /SlurmSpawner\.sbatch: must name a command/]) {
    t.true(lines.some((l) => want.test(l)), `${want} in:\n${lines.join('\n')}`);
  }
  t.false(lines.some((l) => /--gres=gpu:1/.test(l)));
});

test('slurm config: a profile may override SlurmSpawner options, checked the same way', (t) => {
  const profile = (overrides: Record<string, unknown>) => {
    try {
      validateConfig({ Hub: { spawner_class: 'slurm' }, Spawner: { profiles: [{ name: 'p', display_name: 'P', overrides }] } });
      return '';
    } catch (e) {
      return (e as Error).message;
    }
  };
  t.is(profile({ 'SlurmSpawner.partition': 'gpu', 'SlurmSpawner.req_options': ['--gres=gpu:1'] }), '');
  t.regex(profile({ 'SlurmSpawner.req_runtime': 'a week' }), /req_runtime/);
});

test('slurm script: placeholders filled, lines with an empty value left out, the command quoted for the shell', (t) => {
  const script = renderBatchScript(SCHEMA.SlurmSpawner.batch_script.default, {
    job_name: 'hub-alice', username: 'alice', servername: '', homedir: '/home/alice', workdir: '/home/alice', partition: '',
    memory: '1024M', nprocs: '2', runtime: '', options: '#SBATCH --gres=gpu:1', cmd: ['/usr/bin/node', "it's", '--'].map(shellQuote).join(' '),
  });
  t.is(script, [
    '#!/bin/sh', '#SBATCH --job-name=hub-alice', '#SBATCH --chdir=/home/alice', '#SBATCH --output=/home/alice/.hub-slurm-%j.log',
    '#SBATCH --mem=1024M', '#SBATCH --cpus-per-task=2', '#SBATCH --gres=gpu:1', "exec '/usr/bin/node' 'it'\\''s' '--'", '',
  ].join('\n'));
});

test('slurm: why a job ended reads as a person would say it', (t) => {
  t.is(describeJobEnd('12', 'TIMEOUT', { timeLimit: '08:00:00', exitCode: '0:15' }), 'SLURM job 12 reached its time limit of 08:00:00');
  t.is(describeJobEnd('12', 'CANCELLED by 1001'), 'SLURM job 12 was cancelled by 1001');
  t.is(describeJobEnd('12', 'FAILED', { exitCode: '1:0', reason: 'NonZeroExitCode' }), 'SLURM job 12 failed (exit code 1:0) (NonZeroExitCode)');
  t.is(describeJobEnd('12', 'OUT_OF_MEMORY'), 'SLURM job 12 ran out of memory');
  t.is(describeJobEnd('12', 'BOOT_FAIL', { reason: 'None' }), 'SLURM job 12 ended: BOOT_FAIL');
});

test('slurm preflight: a slurm.conf that is not there stops the hub with the reason', (t) => {
  const config = validateConfig({ Hub: { spawner_class: 'slurm' }, SlurmSpawner: { slurm_conf: '/nonexistent/slurm.conf' } });
  const p = preflight({ config, log: createLogger('test', 'silent'), hubId: 'x' });
  t.true(p.problems.some((l) => /SlurmSpawner\.slurm_conf \/nonexistent\/slurm\.conf does not exist/.test(l)), p.problems.join('\n'));
});
