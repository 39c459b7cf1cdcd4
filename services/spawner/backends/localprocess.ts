// `localprocess`: each server runs as the Unix account named like its user, as the established hub's
// LocalProcessSpawner does: that account's uid, gid and supplementary groups, its HOME, USER, LOGNAME and
// SHELL, in its home (or Spawner.notebook_dir), umask 022. The hub's data dir (stores, sockets, the
// cookie secret, server logs) is 0700 and the hub's, so a server cannot read it; homes the hub creates
// are 0700, so servers cannot read each other's. Needs the hub to run as root.
import { execFile } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { promisify } from 'node:util';
import type { HubConfig } from '../../../shared/config.js';
import type { BackendContext, Preflight, SpawnerBackend } from '../backend.js';
import { expandHome, limitsPreflight, LocalProcesses } from '../process.js';

const run = promisify(execFile);
const SETPRIV = '/usr/bin/setpriv';

export interface Account {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

type Options = HubConfig['LocalProcessSpawner'];

/** Why `name` cannot be a Unix account name, or null. Conservative: what useradd accepts everywhere. */
export function invalidAccountName(name: string): string | null {
  return /^[a-z_][a-z0-9_.-]{0,31}$/.test(name) ? null
    : 'system account names are 1 to 32 lowercase letters, digits, "_", "." and "-", starting with a letter or "_"';
}

/** The account from the system's user database (NSS: /etc/passwd, or LDAP and the like when configured). */
export async function lookupAccount(name: string): Promise<Account | null> {
  try {
    const { stdout } = await run('getent', ['passwd', name], { timeout: 5000 });
    const [login, , uid, gid, , home, shell] = stdout.trim().split('\n')[0].split(':');
    return { name: login, uid: Number(uid), gid: Number(gid), home, shell: shell || '/bin/sh' };
  } catch (e) {
    if ((e as { code?: number }).code === 2) return null; // getent: no such key
    throw new Error(`could not look up the system account '${name}': ${(e as Error).message}`);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `useradd -m` with a home only its owner can enter; retried while another useradd holds the lock. */
async function createAccount(name: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await run('useradd', ['-m', '-K', 'HOME_MODE=0700', '--', name], { timeout: 30_000 });
      return;
    } catch (e) {
      const code = (e as { code?: number }).code;
      if (code === 9) return; // created meanwhile (another of the user's servers)
      if (code === 10 && attempt < 8) { // /etc/passwd locked by another useradd
        await sleep(100 * 2 ** Math.min(attempt, 4));
        continue;
      }
      throw new Error(`could not create the system account '${name}': ${((e as { stderr?: string }).stderr || (e as Error).message).trim().split('\n')[0]}`);
    }
  }
}

export function preflight(ctx: BackendContext): Preflight {
  const { config } = ctx;
  const uid = process.getuid?.();
  if (uid !== 0) {
    // the one line that matters: nothing else can work without root
    return { problems: [`Hub.spawner_class "localprocess" runs each server as its user's own system account, which needs the hub to run as root (it runs as uid ${uid}); run it as root, or use "simple"`], warnings: [] };
  }
  const problems = limitsPreflight(ctx);
  if (!existsSync(SETPRIV)) problems.push(`Hub.spawner_class "localprocess" needs ${SETPRIV} (Debian package util-linux)`);
  try {
    const mode = statSync(config.Hub.data_dir).mode & 0o777;
    if (mode & 0o077) {
      problems.push(`Hub.data_dir ${config.Hub.data_dir} is open to other accounts (mode ${mode.toString(8)}); with "localprocess" servers run as other accounts: chmod 700 it`);
    }
  } catch {
    // not there yet: the supervisor creates it 0700
  }
  return { problems, warnings: [] };
}

export function createLocalProcessBackend(ctx: BackendContext): SpawnerBackend {
  const local = new LocalProcesses(ctx);
  const creating = new Map<string, Promise<void>>();
  const warnedHomes = new Set<string>();

  async function account(name: string, options: Options, progress: (m: string) => Promise<void>): Promise<Account> {
    const why = invalidAccountName(name);
    if (why) throw new Error(`'${name}' cannot be a system account name (${why})`);
    let found = await lookupAccount(name);
    if (!found) {
      if (!options.create_system_users) throw new Error(`no system account '${name}'; create it or set LocalProcessSpawner.create_system_users`);
      await progress(`Creating the system account '${name}'`);
      let pending = creating.get(name);
      if (!pending) {
        pending = createAccount(name).finally(() => creating.delete(name));
        creating.set(name, pending);
      }
      await pending;
      ctx.log.info({ event: 'account.created', account: name }, 'system account created');
      found = await lookupAccount(name);
      if (!found) throw new Error(`the system account '${name}' was created but cannot be found`);
    }
    if (found.uid < options.min_uid) {
      throw new Error(`the system account '${name}' has uid ${found.uid}, below LocalProcessSpawner.min_uid ${options.min_uid}: servers never run as root or as system accounts`);
    }
    return found;
  }

  function checkHome(a: Account): void {
    let st;
    try {
      st = statSync(a.home);
    } catch {
      throw new Error(`the home directory ${a.home} of '${a.name}' does not exist`);
    }
    if (st.mode & 0o007 && !warnedHomes.has(a.name)) {
      warnedHomes.add(a.name);
      ctx.log.warn({ event: 'account.home_open', account: a.name, home: a.home, mode: (st.mode & 0o777).toString(8) },
        'this home is readable by every account, other users\' servers included: chmod 700 it');
    }
  }

  return {
    name: 'localprocess',
    start: (req) => local.start(req, async () => {
      const options = req.options as unknown as Options;
      const a = await account(req.server.user, options, req.progress);
      checkHome(a);
      const cwd = expandHome(req.notebookDir, a.home);
      if (!existsSync(cwd)) throw new Error(`Spawner.notebook_dir ${cwd} does not exist for '${a.name}'`);
      return {
        // placed in its cgroups as the hub, then setpriv becomes the account (uid, gid, its groups) and execs
        cmd: [SETPRIV, `--reuid=${a.uid}`, `--regid=${a.gid}`, '--init-groups', '--', ...req.cmd],
        env: { HOME: a.home, USER: a.name, LOGNAME: a.name, SHELL: a.shell },
        cwd,
        account: a.name,
      };
    }),
    poll: (state) => local.poll(state),
    stop: (state, o) => local.stop(state, o.graceMs),
    adopt: (state) => local.adopt(state),
  };
}
