// Which code a process runs: the release (package.json) and the commit the checkout stood at when the process
// started (read from .git once, at load; '' when the hub is not run from a git checkout). `hub status` shows both
// per process, so an operator sees a rolling restart move every process to the new code.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { REPO_ROOT } from './paths.js';

export const HUB_VERSION: string = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')).version;

const read = (path: string): string | null => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
};

/** HEAD's commit, without running git: HEAD, the ref it names (loose, else packed), in a worktree its common dir. */
function headCommit(root: string): string {
  let gitDir = join(root, '.git');
  if (!existsSync(gitDir)) return '';
  if (statSync(gitDir).isFile()) gitDir = resolve(root, (read(gitDir) ?? '').replace(/^gitdir:\s*/, ''));
  const commonDir = resolve(gitDir, read(join(gitDir, 'commondir')) ?? '.');
  const head = read(join(gitDir, 'HEAD')) ?? '';
  if (!head.startsWith('ref:')) return /^[0-9a-f]{40}$/.test(head) ? head : '';
  const ref = head.slice(4).trim();
  const loose = read(join(gitDir, ref)) ?? read(join(commonDir, ref));
  if (loose && /^[0-9a-f]{40}$/.test(loose)) return loose;
  const packed = (read(join(commonDir, 'packed-refs')) ?? '').split('\n').find((l) => l.endsWith(` ${ref}`));
  return packed?.slice(0, 40) ?? '';
}

export const HUB_COMMIT: string = headCommit(REPO_ROOT).slice(0, 12);

/** "0.1.0 (abc123def456)": the release and commit, as `hub status` prints them. */
export const codeVersion = (version: string, commit: string) => (commit ? `${version} (${commit})` : version);
