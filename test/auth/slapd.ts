// A real OpenLDAP directory for tests: Debian's slapd started from a temp dir on 127.0.0.1 (the recipe in
// /work/shared/NOTES.md, "Identity"), seeded with slapadd before it starts. With `tls`, a test CA made by
// openssl signs the server's certificate (for 127.0.0.1 and localhost) and slapd also listens for LDAPS;
// StartTLS works on the plain port. A second CA that signed nothing stands for "a CA the directory's
// certificate does not come from". Nothing here is a stand-in: if slapd cannot start, startSlapd() throws
// with the reason and slapd's own words, and the test fails.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, sleep } from '../harness.js';

const run = promisify(execFile);

export const BASE = 'dc=hub,dc=test';

export type GroupKind = 'groupOfNames' | 'groupOfUniqueNames' | 'posixGroup';

export interface Person {
  uid: string;
  password: string;
  /** the organizational unit under BASE it lives in (default "people") */
  ou?: string;
  mail?: string;
  /** more attributes of the entry, e.g. {displayName: 'Alice A.', telephoneNumber: ['1', '2']} */
  attributes?: Record<string, string | string[]>;
}

export interface Group {
  cn: string;
  kind: GroupKind;
  /** the organizational unit under BASE it lives in (default "groups") */
  ou?: string;
  /** members by uid (as people in this seed); groupOfNames/groupOfUniqueNames list their DNs, posixGroup their uids */
  members: string[];
  description?: string;
}

export interface SlapdOptions {
  people: Person[];
  groups?: Group[];
  /** a service account (cn=<name>,BASE) that may search, for lookup_dn_search_user */
  searchUser?: { name: string; password: string };
  /** make a test CA and serve StartTLS and LDAPS */
  tls?: boolean;
}

export interface Slapd {
  host: string;
  /** plain LDAP (and StartTLS with `tls`) */
  port: number;
  /** LDAPS, with `tls` */
  ldapsPort: number | null;
  /** the test CA that signed the server's certificate (PEM file), with `tls` */
  caFile: string | null;
  /** a CA that did not sign it, with `tls` */
  otherCaFile: string | null;
  base: string;
  /** the DN of a seeded person or group */
  personDn(uid: string): string;
  groupDn(cn: string): string;
  searchUserDn: string | null;
  dir: string;
  stop(): Promise<void>;
}

/** RFC 4514 escaping of one attribute value in a DN (the seed's own, independent of the backend's). */
export function dnValue(v: string): string {
  return v
    .replace(/[\\"+,;<>=]/g, (c) => `\\${c}`)
    .replace(/\0/g, '\\00')
    .replace(/^([ #])/, '\\$1')
    .replace(/ $/, '\\ ');
}

/** {SSHA} of a password, as slappasswd makes it: base64(sha1(password + salt) + salt). */
function ssha(password: string): string {
  const salt = randomBytes(8);
  return `{SSHA}${Buffer.concat([createHash('sha1').update(password).update(salt).digest(), salt]).toString('base64')}`;
}

/** One LDIF attribute line, base64 when the value is not SAFE-STRING (RFC 2849). */
function line(attr: string, value: string): string {
  return /^[\x01-\x09\x0b\x0c\x0e-\x1f\x21-\x39\x3b\x3d-\x7f][\x01-\x09\x0b\x0c\x0e-\x7f]*$/.test(value) && !value.endsWith(' ')
    ? `${attr}: ${value}` : `${attr}:: ${Buffer.from(value).toString('base64')}`;
}

function entry(dn: string, attrs: [string, string | string[]][]): string {
  return [line('dn', dn), ...attrs.flatMap(([a, v]) => (Array.isArray(v) ? v : [v]).map((x) => line(a, x)))].join('\n');
}

function seedLdif(o: SlapdOptions, personDn: (uid: string) => string, groupDn: (g: Group) => string): string {
  const ous = new Set(['people', 'groups', ...o.people.map((p) => p.ou ?? 'people'), ...(o.groups ?? []).map((g) => g.ou ?? 'groups')]);
  const out = [
    entry(BASE, [['objectClass', ['dcObject', 'organization']], ['dc', 'hub'], ['o', 'hub test']]),
    ...[...ous].map((ou) => entry(`ou=${dnValue(ou)},${BASE}`, [['objectClass', 'organizationalUnit'], ['ou', ou]])),
  ];
  if (o.searchUser) {
    out.push(entry(`cn=${dnValue(o.searchUser.name)},${BASE}`, [
      ['objectClass', ['organizationalRole', 'simpleSecurityObject']], ['cn', o.searchUser.name], ['userPassword', ssha(o.searchUser.password)],
    ]));
  }
  o.people.forEach((p, i) => {
    out.push(entry(personDn(p.uid), [
      ['objectClass', ['inetOrgPerson', 'posixAccount']], ['uid', p.uid], ['cn', p.uid], ['sn', p.uid],
      ['uidNumber', String(20000 + i)], ['gidNumber', '20000'], ['homeDirectory', `/home/${p.uid.replace(/[^a-z0-9]/gi, '_')}`],
      ['userPassword', ssha(p.password)], ...(p.mail ? [['mail', p.mail] as [string, string]] : []),
      ...Object.entries(p.attributes ?? {}),
    ]));
  });
  (o.groups ?? []).forEach((g, i) => {
    const desc: [string, string][] = g.description ? [['description', g.description]] : [];
    if (g.kind === 'posixGroup') {
      out.push(entry(groupDn(g), [['objectClass', 'posixGroup'], ['cn', g.cn], ['gidNumber', String(30000 + i)], ...desc, ...(g.members.length ? [['memberUid', g.members] as [string, string[]]] : [])]));
    } else {
      const attr = g.kind === 'groupOfNames' ? 'member' : 'uniqueMember';
      // both classes need at least one member: an empty group names the base itself, as directories often do
      out.push(entry(groupDn(g), [['objectClass', g.kind], ['cn', g.cn], ...desc, [attr, g.members.length ? g.members.map(personDn) : [BASE]]]));
    }
  });
  return `${out.join('\n\n')}\n`;
}

async function openssl(dir: string, args: string[]): Promise<void> {
  try {
    await run('openssl', args, { cwd: dir, timeout: 30_000 });
  } catch (e) {
    throw new Error(`slapd test directory: openssl ${args[0]} failed: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
}

/** A CA, and a server certificate it signs for 127.0.0.1 and localhost; plus a CA that signs nothing. */
async function makeCertificates(dir: string): Promise<void> {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await openssl(dir, ['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=hub test LDAP CA']);
  await openssl(dir, ['req', '-x509', ...ec, '-keyout', 'other-ca.key', '-out', 'other-ca.pem', '-days', '2', '-subj', '/CN=hub test unrelated CA']);
  await openssl(dir, ['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost']);
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth\nkeyUsage = critical, digitalSignature\n');
  await openssl(dir, ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'server.ext']);
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

const exited = (p: ChildProcess) => p.exitCode !== null || p.signalCode !== null;

async function stopProcess(p: ChildProcess): Promise<void> {
  if (exited(p)) return;
  const gone = new Promise((r) => p.once('exit', r));
  p.kill('SIGTERM');
  if (await Promise.race([gone.then(() => true), sleep(3000).then(() => false)])) return;
  p.kill('SIGKILL');
  await gone;
}

/** Starts the directory; throws with slapd's own output if it cannot. */
export async function startSlapd(o: SlapdOptions): Promise<Slapd> {
  for (const f of ['/usr/sbin/slapd', '/usr/sbin/slapadd', '/usr/lib/ldap/back_mdb.so', '/etc/ldap/schema/nis.schema']) {
    if (!existsSync(f)) throw new Error(`slapd test directory: ${f} is missing; run \`node scripts/setup.mjs --for-tests\` (installs slapd and ldap-utils)`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'hub-slapd-'));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  try {
    const people = new Map(o.people.map((p) => [p.uid, p]));
    const personDn = (uid: string) => {
      const p = people.get(uid);
      if (!p) throw new Error(`slapd test directory: no person ${JSON.stringify(uid)} in the seed`);
      return `uid=${dnValue(uid)},ou=${dnValue(p.ou ?? 'people')},${BASE}`;
    };
    const groupDnOf = (g: Group) => `cn=${dnValue(g.cn)},ou=${dnValue(g.ou ?? 'groups')},${BASE}`;
    const groups = new Map((o.groups ?? []).map((g) => [g.cn, g]));
    const rootPassword = randomBytes(12).toString('hex');
    if (o.tls) await makeCertificates(dir);
    const conf = join(dir, 'slapd.conf');
    const db = join(dir, 'db');
    mkdirSync(db);
    writeFileSync(conf, [
      ...['core', 'cosine', 'inetorgperson', 'nis'].map((s) => `include /etc/ldap/schema/${s}.schema`),
      `pidfile ${dir}/slapd.pid`, `argsfile ${dir}/slapd.args`,
      'modulepath /usr/lib/ldap', 'moduleload back_mdb',
      ...(o.tls ? [`TLSCACertificateFile ${dir}/ca.pem`, `TLSCertificateFile ${dir}/server.pem`, `TLSCertificateKeyFile ${dir}/server.key`] : []),
      'database mdb', `directory ${db}`, `suffix "${BASE}"`, `rootdn "cn=admin,${BASE}"`, `rootpw ${ssha(rootPassword)}`, 'maxsize 10485760',
      // anonymous binds may only authenticate (a lookup without a search user is refused, as in most
      // directories), except that the names under ou=public may be looked up anonymously
      'access to attrs=userPassword by self =xw by anonymous auth by * none',
      `access to dn.subtree="ou=public,${BASE}" attrs=entry,objectClass,uid by * read`,
      'access to * by users read by anonymous auth',
      '',
    ].join('\n'));
    const ldif = join(dir, 'seed.ldif');
    writeFileSync(ldif, seedLdif(o, personDn, groupDnOf));
    try {
      await run('/usr/sbin/slapadd', ['-q', '-f', conf, '-l', ldif], { timeout: 30_000 });
    } catch (e) {
      throw new Error(`slapd test directory: slapadd could not load the seed: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
    }
    // a port found free may be taken before slapd binds it: a few tries, each with new ports
    let lastFailure = '';
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = await freePort();
      const ldapsPort = o.tls ? await freePort() : null;
      const urls = [`ldap://127.0.0.1:${port}/`, ...(ldapsPort ? [`ldaps://127.0.0.1:${ldapsPort}/`] : [])].join(' ');
      // -d 0: stay in the foreground (the process is ours to stop), writing nothing but errors to stderr
      const proc = spawn('/usr/sbin/slapd', ['-f', conf, '-h', urls, '-d', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      proc.stderr!.setEncoding('utf8').on('data', (s: string) => { stderr = (stderr + s).slice(-4000); });
      proc.on('error', (e) => { stderr += `\n${e.message}`; });
      const until = Date.now() + 10_000;
      let up = false;
      while (!up && !exited(proc) && Date.now() < until) {
        up = (await accepts(port)) && (!ldapsPort || (await accepts(ldapsPort)));
        if (!up) await sleep(50);
      }
      if (up) {
        return {
          host: '127.0.0.1', port, ldapsPort,
          caFile: o.tls ? join(dir, 'ca.pem') : null,
          otherCaFile: o.tls ? join(dir, 'other-ca.pem') : null,
          base: BASE,
          personDn,
          groupDn: (cn) => {
            const g = groups.get(cn);
            if (!g) throw new Error(`slapd test directory: no group ${JSON.stringify(cn)} in the seed`);
            return groupDnOf(g);
          },
          searchUserDn: o.searchUser ? `cn=${dnValue(o.searchUser.name)},${BASE}` : null,
          dir,
          async stop() {
            await stopProcess(proc);
            cleanup();
          },
        };
      }
      await stopProcess(proc);
      lastFailure = exited(proc) && proc.exitCode !== null
        ? `slapd exited with code ${proc.exitCode}: ${stderr.trim() || '(no output)'}`
        : `slapd did not accept connections on ${urls} within 10 s: ${stderr.trim() || '(no output)'}`;
      if (!/already in use/i.test(stderr)) break;
    }
    throw new Error(`slapd test directory: ${lastFailure}`);
  } catch (e) {
    cleanup();
    throw e;
  }
}
