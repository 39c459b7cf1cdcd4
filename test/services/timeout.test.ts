// A service's `timeout` (the established hub 6.0's): how long the hub waits at start for a service with a url to
// answer. A hub-managed service that never answers stops the hub (exit code 1, a line naming it); an external one
// that does not answer is a warning and the hub runs on; one that answers is noted.
import test from 'ava';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, NATS_TOKEN, runHubCommand, startHub, waitFor } from '../harness.js';
import { randomToken } from '../api/client.js';
import { WHOAMI } from '../oauth/browser.js';

test('service timeout: a hub-managed service that never answers stops the hub, naming it', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-svc-timeout-'));
  try {
    const silentPort = await freePort();
    const config = {
      Hub: {
        data_dir: dataDir, port: await freePort(), nats_port: await freePort(), log_level: 'warn',
        // runs, but never listens on its url
        services: [{ name: 'mute', url: `http://127.0.0.1:${silentPort}`, command: ['sleep', '60'], timeout: 2 }],
      },
    };
    writeFileSync(join(dataDir, 'hub.json'), JSON.stringify(config));
    const r = await runHubCommand(['--config', join(dataDir, 'hub.json')], { env: { HUB_NATS_TOKEN: NATS_TOKEN } });
    t.is(r.code, 1, r.stdout + r.stderr);
    t.regex(r.stdout + r.stderr, new RegExp(`hub-managed service mute did not answer at http://127.0.0.1:${silentPort}: it did not answer within 2 s; the hub stops`));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('service timeout: an external service that does not answer is a warning; one that answers is noted; the hub runs on', async (t) => {
  const awayPort = await freePort();
  const whoamiPort = await freePort();
  const hub = await startHub({
    config: {
      Hub: {
        log_level: 'info',
        services: [
          { name: 'away', url: `http://127.0.0.1:${awayPort}`, api_token: randomToken(), timeout: 1 },
          { name: 'present', url: `http://127.0.0.1:${whoamiPort}`, command: [process.execPath, WHOAMI], timeout: 20 },
        ],
      },
    },
  });
  try {
    await waitFor('both checks to end', async () => (/"service":"away"/.test(hub.logs()) && /"service":"present"/.test(hub.logs()) ? true : undefined), 30_000, 100);
    const lines = hub.logs().split('\n').filter((l) => l.includes('"event":"service.'));
    const away = lines.find((l) => l.includes('"service":"away"'))!;
    t.regex(away, /"event":"service.unreachable"/);
    t.regex(away, new RegExp(`cannot connect to external service away at http://127.0.0.1:${awayPort}: it did not answer within 1 s. Is it running\\?`));
    t.regex(lines.find((l) => l.includes('"service":"present"'))!, /"event":"service.reachable"/);
    t.is((await fetch(`${hub.url}/hub/health`)).status, 200, 'the hub runs on');
  } finally {
    await hub.stop();
  }
});

test('service timeout: checked as the configuration is read', async (t) => {
  const r = await runHubCommand(['--Hub.services=[{"name":"x","url":"http://127.0.0.1:1","timeout":0}]', '--Hub.port=1'], {});
  t.not(r.code, 0);
  t.regex(r.stderr + r.stdout, /Hub.services "x".timeout: seconds to wait for the service at start, at least 1/);
});
