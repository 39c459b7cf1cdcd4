// How `hub import jupyterhub` changes several stores all or none. It writes complete new copies of every file it
// changes (each actor's SQLite store, the imported roles and services, the named servers) beside the real ones,
// fsyncs them, then writes a journal naming every rename and only then renames. A kill before the journal leaves
// the old files (the copies are debris, removed by the next import); a kill after it leaves a journal that the
// next import or the next hub start (the supervisor, before any actor opens a store) finishes. So no actor ever
// opens a half-imported set of stores.
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { importedServersPath } from './paths.js';

export const importDir = (dataDir: string) => join(dataDir, 'imported');
const journalPath = (dataDir: string) => join(importDir(dataDir), 'journal.json');

/** Where an import writes its copies before the renames (removed whole when it starts again). */
export const stagingDir = (dataDir: string) => join(importDir(dataDir), 'staging');

export function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A store's file moved into place: its old write-ahead log and index go first (they belong to the old file). */
function moveInto(from: string, to: string): void {
  if (!existsSync(from)) return; // already moved by an earlier, interrupted finish
  for (const side of ['-wal', '-shm']) rmSync(`${to}${side}`, { force: true });
  renameSync(from, to);
}

/** Finishes an import that was killed after its journal was written; true when there was one. */
export function finishPendingImport(dataDir: string): boolean {
  const journal = journalPath(dataDir);
  if (!existsSync(journal)) return false;
  const moves = JSON.parse(readFileSync(journal, 'utf8')) as [string, string][];
  for (const [from, to] of moves) moveInto(from, to);
  fsyncPath(dataDir);
  fsyncPath(importDir(dataDir));
  rmSync(journal);
  rmSync(stagingDir(dataDir), { recursive: true, force: true });
  return true;
}

/** Makes the copies the real files, all of them or (killed before the journal is written) none. */
export function commitImport(dataDir: string, moves: [string, string][]): void {
  for (const [from] of moves) fsyncPath(from);
  fsyncPath(dirname(moves[0][0]));
  const journal = journalPath(dataDir);
  writeFileSync(`${journal}.tmp`, JSON.stringify(moves), { mode: 0o600 });
  fsyncPath(`${journal}.tmp`);
  renameSync(`${journal}.tmp`, journal); // the commit point
  fsyncPath(importDir(dataDir));
  finishPendingImport(dataDir);
}

/** Removes what an import left before its commit point (its copies), so a new one starts clean. */
export function clearStaging(dataDir: string): string {
  const dir = stagingDir(dataDir);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

/** The spawner, at start: the imported named servers handed to `apply` once, then the file removed. */
export async function takeImportedServers<T>(dataDir: string, apply: (servers: T[]) => Promise<void>): Promise<void> {
  const path = importedServersPath(dataDir);
  if (!existsSync(path)) return;
  await apply(JSON.parse(readFileSync(path, 'utf8')) as T[]);
  rmSync(path, { force: true });
}
