// Ports for what the tests start themselves (hubs, NATS, stand-in services), taken below the kernel's ephemeral
// range and reserved across every test process at once.
//
// Why not the kernel's port 0: ava runs several test files in separate processes, and each hub's spawner picks
// its servers' ports from the kernel too. A port picked and let go in one process was offered to another, whose
// server listened there in the seconds before the first hub's gateway did; the test's requests then reached
// that stand-in server, which answers 200 to anything (a CI run on 2026-11-28). Below the ephemeral range no
// kernel-picked port lands, and a lock file per port (created exclusively) keeps two test processes apart.
import { closeSync, mkdirSync, openSync, readdirSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { portInUse } from '../shared/ports.js';

/** Below 32768 (the ephemeral range's usual start) and below 30000 (Kubernetes' NodePorts). */
export const TEST_PORT_RANGE = { low: 20000, high: 29999 } as const;
const LOCKS = join(tmpdir(), 'hub-test-ports');
const MAX_ATTEMPTS = 200;
/** longer than any test run (CI stops at 90 minutes) */
const STALE_MS = 6 * 3600_000;
const mine = new Set<number>();

/**
 * Takes the lock file of `port` for this process. A file is left behind only by a test process killed outright;
 * one older than any test run is taken over (not sooner: checking its holder and taking it over cannot be one step).
 */
function lock(port: number): boolean {
  const file = join(LOCKS, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let age = 0;
      try {
        age = Date.now() - statSync(file).mtimeMs;
      } catch {
        continue; // removed meanwhile: try again
      }
      if (age < STALE_MS) return false;
      rmSync(file, { force: true });
    }
  }
  return false;
}

/** A port of TEST_PORT_RANGE that no test process holds and nobody listens on; this process's until it exits. */
export async function testPort(): Promise<number> {
  mkdirSync(LOCKS, { recursive: true });
  const span = TEST_PORT_RANGE.high - TEST_PORT_RANGE.low + 1;
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const port = TEST_PORT_RANGE.low + Math.floor(Math.random() * span);
    if (mine.has(port) || !lock(port)) continue;
    // nobody listens there (a plain bind, refused beside any listener): shared/ports.ts
    if ((await portInUse('127.0.0.1', port, 0)) === null) {
      mine.add(port);
      return port;
    }
    rmSync(join(LOCKS, String(port)), { force: true });
  }
  throw new Error(`no free test port in ${MAX_ATTEMPTS} attempts within ${TEST_PORT_RANGE.low}-${TEST_PORT_RANGE.high}`);
}

// this process's lock files go at its exit
process.on('exit', () => {
  for (const port of mine) rmSync(join(LOCKS, String(port)), { force: true });
});

// A test process ended by a signal runs its exit handlers too (these lock files, the harness's hubs): Node's own
// handling of these signals ends the process without them, and ava ends a timed-out worker with SIGTERM.
for (const [signal, number] of [['SIGTERM', 15], ['SIGINT', 2], ['SIGHUP', 1]] as const) {
  process.once(signal, () => process.exit(128 + number));
}

/** The ports some test process holds now (their lock files). */
export const lockedTestPorts = (): number[] => readdirSync(LOCKS).map(Number).filter(Number.isInteger);
