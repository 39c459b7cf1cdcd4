// `npm run bench import`: `hub import jupyterhub` of an established hub's database with BENCH_IMPORT_USERS users
// (default 100,000) and two API tokens each (BENCH_IMPORT_TOKENS_PER_USER), every 10th with a named server, all in
// one group: the SQLite file made by the established hub's own orm (jupyterhub 6.1.1, the test venv) and filled in
// bulk (test/cli/jupyterhub-fixture.ts). Timed: the import command from start to exit (target: at most 60 s), then
// this hub started on the result, timed to its first answer to an imported token, and sequential reads right after
// (GET /hub/api/user with imported tokens never seen before: each one's first check of the established hub's hash;
// then GET /hub/api/users/<name> by an imported admin token, each user twice, and pages of users), p50/p99.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, SUPERVISOR } from '../harness.js';
import { makeJupyterhubDb } from '../cli/jupyterhub-fixture.js';

const USERS = Number(process.env.BENCH_IMPORT_USERS ?? 100_000);
const TOKENS_PER_USER = Number(process.env.BENCH_IMPORT_TOKENS_PER_USER ?? 2);
const TARGET_S = 60;
const SAMPLES = 200;

function runImport(db: string, dataDir: string): Promise<{ code: number | null; out: string; ms: number }> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const p = spawn(process.execPath, [SUPERVISOR, 'import', 'jupyterhub', '--db', db, `--Hub.data_dir=${dataDir}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 10 * TARGET_S * 1000);
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, ms: performance.now() - t0 }); });
  });
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

async function timed(url: string, token: string): Promise<{ ms: number; status: number; body: any }> {
  const t0 = performance.now();
  const r = await fetch(url, { headers: { authorization: `token ${token}` } });
  const body = await r.json();
  return { ms: performance.now() - t0, status: r.status, body };
}

export async function importBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-import-'));
  try {
    const db = join(dir, 'jupyterhub.sqlite');
    let t0 = performance.now();
    const fixture = await makeJupyterhubDb(db, { users: USERS, tokensPerUser: TOKENS_PER_USER });
    console.log(`import: the established hub's database with ${fixture.users} users and ${fixture.tokens} tokens made in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    const dataDir = join(dir, 'hub');
    const run = await runImport(db, dataDir);
    if (run.code !== 0) throw new Error(`hub import jupyterhub exited ${run.code}: ${run.out}`);
    console.log(run.out.trim().split('\n').map((l) => `  ${l}`).join('\n'));
    t0 = performance.now();
    const hub = await startHub({ reuse: { dataDir, port: await freePort(), natsPort: await freePort() }, config: { Hub: { authenticator_class: 'dummy', allow_named_servers: true } } });
    try {
      const [firstUser, firstToken] = [...fixture.sample][0];
      const first = await timed(`${hub.url}/hub/api/user`, firstToken);
      if (first.status !== 200 || first.body.name !== firstUser) throw new Error(`an imported token of ${firstUser}: ${first.status} ${JSON.stringify(first.body)}`);
      const startMs = performance.now() - t0;
      const admin = fixture.sample.get('user-0')!; // every 100th user is an admin
      const firstChecks: number[] = [];
      for (const [name, token] of fixture.sample) {
        const r = await timed(`${hub.url}/hub/api/user`, token);
        if (r.status !== 200 || r.body.name !== name) throw new Error(`an imported token of ${name}: ${r.status}`);
        firstChecks.push(r.ms);
      }
      // each user read twice: the first asks the auth actor (the gateway has not seen them yet), the second is the
      // gateway's memory, as on any hub
      const reads: number[][] = [[], []];
      for (const pass of reads) {
        for (let i = 0; i < SAMPLES; i++) {
          const name = `user-${(i * 7919) % USERS}`;
          const r = await timed(`${hub.url}/hub/api/users/${name}`, admin);
          if (r.status !== 200 || r.body.name !== name) throw new Error(`GET /hub/api/users/${name}: ${r.status}`);
          pass.push(r.ms);
        }
      }
      const pages: number[] = [];
      for (let i = 0; i < 50; i++) {
        const r = await timed(`${hub.url}/hub/api/users?offset=${(i * 1999) % USERS}&limit=50`, admin);
        if (r.status !== 200 || r.body.length !== 50) throw new Error(`a page of users: ${r.status}`);
        pages.push(r.ms);
      }
      const seconds = run.ms / 1000;
      console.log([
        `import: ${USERS} users, ${fixture.tokens} tokens: the import command took ${seconds.toFixed(1)} s (target ≤ ${TARGET_S} s: ${seconds <= TARGET_S ? 'PASS' : 'MISS'})`,
        `  this hub started on it and answered an imported token ${(startMs / 1000).toFixed(1)} s after its start command`,
        `  first use of ${firstChecks.length} imported tokens (the established hub's hash checked once, then cached): p50 ${pct(firstChecks, 50).toFixed(1)} ms`,
        `  GET /hub/api/users/<name> by an imported admin token, ${SAMPLES} users one at a time: first read p50 ${pct(reads[0], 50).toFixed(2)} ms, p99 ${pct(reads[0], 99).toFixed(2)} ms; again p50 ${pct(reads[1], 50).toFixed(2)} ms, p99 ${pct(reads[1], 99).toFixed(2)} ms`,
        `  GET /hub/api/users?offset=…&limit=50: p50 ${pct(pages, 50).toFixed(2)} ms, p99 ${pct(pages, 99).toFixed(2)} ms`,
      ].join('\n'));
    } finally {
      await hub.stop({ keepDataDir: true });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
