// Real Unix accounts for the PAM tests: groups, accounts with passwords (useradd, chpasswd), a locked one
// (usermod -L) and an expired one (chage -E 0), and their removal. Root only; a missing tool is a failure naming it.
import { execFileSync } from 'node:child_process';

export interface UnixAccount { name: string; password: string; groups: string[] }

export const runTool = (command: string, args: string[], input?: string) => execFileSync(command, args, { input, stdio: ['pipe', 'pipe', 'pipe'] });

export function makeUnixAccounts(what: string, { groups, accounts, locked, expired }: { groups: string[]; accounts: UnixAccount[]; locked: UnixAccount; expired: UnixAccount }): void {
  if (process.geteuid?.() !== 0) throw new Error(`${what} need root: they create Unix accounts and PAM reads /etc/shadow`);
  for (const tool of ['useradd', 'usermod', 'userdel', 'groupadd', 'groupdel', 'chpasswd', 'chage']) {
    try {
      runTool('sh', ['-c', `command -v ${tool}`]);
    } catch {
      throw new Error(`${tool} is missing (Debian package "passwd")`);
    }
  }
  for (const group of groups) runTool('groupadd', [group]);
  for (const a of accounts) runTool('useradd', ['-M', '-s', '/usr/sbin/nologin', ...(a.groups.length ? ['-G', a.groups.join(',')] : []), a.name]);
  runTool('chpasswd', [], accounts.map((a) => `${a.name}:${a.password}\n`).join(''));
  runTool('usermod', ['-L', locked.name]);
  runTool('chage', ['-E', '0', expired.name]);
}

export function removeUnixAccounts({ groups, accounts }: { groups: string[]; accounts: UnixAccount[] }): void {
  for (const a of accounts) {
    try { runTool('userdel', [a.name]); } catch { /* never made */ }
  }
  for (const group of groups) {
    try { runTool('groupdel', [group]); } catch { /* never made */ }
  }
}
