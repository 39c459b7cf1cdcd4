// Starts test/fixtures/oidc-provider.mjs (a real OpenID Connect provider, panva's oidc-provider) in a child
// process, and drives its login form and consent page like a browser would, up to the redirect back to the client.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { REPO, stopChild } from '../harness.js';
import { Browser, type Page } from './helpers.js';

export interface OidcUser { password: string; groups?: string[]; roles?: string[]; email?: string }

export interface OidcProvider {
  issuer: string;
  proc: ChildProcess;
  setUsers(users: Record<string, Partial<OidcUser>>): Promise<void>;
  /** every grant, token and session of the user is gone; the count of what was removed */
  revoke(user: string): Promise<number>;
  /** a new signing key; the kid it carries */
  rotate(): Promise<string>;
  /** the next token answer's id_token re-signed with changes (see the fixture) */
  tamper(t: { aud?: unknown; azp?: unknown; nonce?: unknown; foreignKey?: boolean; userinfoSub?: string }): Promise<void>;
  fail(f: { path: string; mode: 'hang' | '503' | '429' | 'garbage' | 'huge' } | null): Promise<void>;
  features(f: { userinfo?: boolean; conformIdTokenClaims?: boolean }): Promise<void>;
  stats(): Promise<Record<string, number>>;
  stop(): Promise<void>;
}

export async function startOidcProvider(opts: { users: Record<string, OidcUser>; clients: Record<string, unknown>[]; accessTtl?: number; port?: number }): Promise<OidcProvider> {
  const proc = spawn(process.execPath, [join(REPO, 'test', 'fixtures', 'oidc-provider.mjs')], {
    env: {
      ...process.env, OIDC_USERS: JSON.stringify(opts.users), OIDC_CLIENTS: JSON.stringify(opts.clients),
      OIDC_ACCESS_TTL: String(opts.accessTtl ?? 600), OIDC_PORT: String(opts.port ?? 0),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => { stderr = (stderr + c.toString()).slice(-4000); });
  const issuer = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`the OpenID provider fixture did not start in 15 s: ${stderr}`)); }, 15_000);
    createInterface({ input: proc.stdout! }).once('line', (l) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(l).issuer);
      } catch {
        reject(new Error(`the OpenID provider fixture said ${JSON.stringify(l)}: ${stderr}`));
      }
    });
    proc.once('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`the OpenID provider fixture exited (${code ?? signal}) before listening: ${stderr}`)); });
  });
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${issuer}${path}`, {
      method, signal: AbortSignal.timeout(5000),
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  return {
    issuer, proc,
    setUsers: async (users) => void (await call('POST', '/__test/users', users)),
    revoke: async (user) => (await call('POST', `/__test/revoke?user=${encodeURIComponent(user)}`)).revoked,
    rotate: async () => (await call('POST', '/__test/rotate')).kid,
    tamper: async (t) => void (await call('POST', '/__test/tamper', t)),
    fail: async (f) => void (await call('POST', '/__test/fail', f ?? {})),
    features: async (f) => void (await call('POST', '/__test/features', f)),
    stats: () => call('GET', '/__test/stats'),
    stop: () => stopChild(proc),
  };
}

/**
 * From the authorization URL through the provider's login form and consent page to its redirect back to
 * `redirectUri` (not followed): the Page whose `location` holds code and state (or error). Each step is
 * checked; a fresh Browser is a browser without a session at the provider.
 */
export async function providerLogin(authorizeUrl: string, redirectUri: string, username: string, password: string, b = new Browser()): Promise<Page> {
  let page = await b.get(authorizeUrl);
  for (let step = 0; step < 12; step++) {
    if (page.location?.startsWith(redirectUri)) return page;
    if (page.status >= 300 && page.status < 400 && page.location) {
      page = await b.get(page.location);
      continue;
    }
    if (page.status !== 200) throw new Error(`provider step ${step}: ${page.status} ${page.body.slice(0, 300)}`);
    const action = /<form method="post" action="([^"]+\/(?:login|confirm))">/.exec(page.body)?.[1];
    if (!action) throw new Error(`provider step ${step}: no form in ${page.body.slice(0, 300)}`);
    if (page.body.includes('Wrong username or password')) return page;
    const target = new URL(action, authorizeUrl).toString();
    page = action.endsWith('/login') ? await b.post(target, { username, password }) : await b.post(target, {});
  }
  throw new Error('provider login: no redirect back after 12 steps');
}
