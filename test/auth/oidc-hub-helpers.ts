// A whole hub logging in through a real OpenID Connect provider (test/fixtures/oidc-provider.mjs, panva's
// oidc-provider), configured with the issuer alone: the hub's port is chosen first, since the provider must know
// the hub's callback (and where its logout sends browsers back) before the hub starts. And the way a person signs
// in: the hub's login page, its "Sign in with …" button, the provider's own login form and consent page, back.
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, type HubUnderTest } from '../harness.js';
import { Browser, type Page } from './helpers.js';
import { providerLogin, startOidcProvider, type OidcProvider, type OidcUser } from './oidc-provider.js';

export interface OidcHub {
  hub: HubUnderTest;
  op: OidcProvider;
  /** the hub's /hub/oauth_callback, as registered at the provider */
  callback: string;
  /** where the provider sends a browser after the hub's logout (registered at the provider) */
  afterLogout: string;
  clientId: string;
  stop(): Promise<void>;
}

/**
 * A provider with `users` and one confidential client for the hub, then a hub whose OAuthenticator names the
 * provider's issuer, client_id and client_secret (and whatever `config` adds). A hub that does not start stops
 * the provider too.
 */
export async function startHubWithOidc(users: Record<string, OidcUser>, config: Record<string, Record<string, unknown>> = {}): Promise<OidcHub> {
  const port = await freePort();
  const callback = `http://127.0.0.1:${port}/hub/oauth_callback`;
  const afterLogout = `http://127.0.0.1:${port}/hub/login`;
  const clientId = 'hub-oidc';
  const secret = `oidc-hub-secret-${randomBytes(16).toString('hex')}`;
  const op = await startOidcProvider({
    users,
    clients: [{
      client_id: clientId, client_secret: secret, token_endpoint_auth_method: 'client_secret_post',
      redirect_uris: [callback], post_logout_redirect_uris: [afterLogout],
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
    }],
  });
  let hub: HubUnderTest;
  try {
    hub = await startHub({
      reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
      config: {
        ...config,
        Hub: { authenticator_class: 'oauth', ...config.Hub },
        OAuthenticator: { oidc_issuer: op.issuer, client_id: clientId, client_secret: secret, ...config.OAuthenticator },
      },
    });
  } catch (e) {
    await op.stop();
    throw e;
  }
  return {
    hub, op, callback, afterLogout, clientId,
    async stop() {
      await hub.stop();
      await op.stop();
    },
  };
}

const unescapeHtml = (s: string) => s.replace(/&amp;/g, '&').replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n)));

/** The href and text of the login page's "Sign in with …" button (id="login-with"), or undefined when it has none. */
export function loginButton(html: string): { href: string; text: string } | undefined {
  const m = /<a [^>]*id="login-with"[^>]*href="([^"]*)"[^>]*>([^<]*)<\/a>/.exec(html);
  return m ? { href: unescapeHtml(m[1]), text: unescapeHtml(m[2]) } : undefined;
}

/**
 * Signs in as a person would: GET /hub/login, follow its button to /hub/oauth_login, the provider's login form
 * and consent (with `b`'s cookies at the provider too), and the provider's redirect back to the hub's callback.
 * Returns the hub's answer to the callback (302 onwards when logged in, a 403 page when refused). Each step is
 * checked; a failing one throws with what the hub or the provider said.
 */
export async function signIn(b: Browser, o: OidcHub, user: string, password: string, next = ''): Promise<Page> {
  const login = await b.get(`${o.hub.url}/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
  if (login.status !== 200) throw new Error(`GET /hub/login: ${login.status} ${login.body.slice(0, 300)}`);
  const button = loginButton(login.body);
  if (!button) throw new Error(`the login page has no "Sign in with" button: ${login.body.slice(0, 500)}`);
  const start = await b.get(new URL(button.href, o.hub.url).toString());
  if (start.status !== 302 || !start.location?.startsWith(`${o.op.issuer}/`)) throw new Error(`${button.href}: ${start.status} ${start.location} ${start.body.slice(0, 300)}`);
  const back = await providerLogin(start.location, o.callback, user, password, b);
  if (!back.location?.startsWith(o.callback)) throw new Error(`the provider did not send the browser back: ${back.status} ${back.body.slice(0, 300)}`);
  return b.get(back.location);
}
