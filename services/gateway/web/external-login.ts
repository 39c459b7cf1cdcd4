// Logging in through an external identity provider (an authenticator with a "Sign in with …" button), the
// gateway's half. /hub/oauth_login keeps a random `state`, an OpenID `nonce`, a PKCE verifier and where to go afterwards in a sealed,
// short-lived cookie, then sends the browser to the provider (the URL comes from the auth actor, which
// knows the provider). /hub/oauth_callback accepts a code only together with that same state (so nobody
// can plant their own login in someone's browser), has the auth actor finish the login, sets the login
// cookies and returns the browser to where it was going.
import { createHash, randomBytes } from 'node:crypto';
import { macEquals, parseCookies, serializeCookie } from '../../../shared/cookies.js';
import { within } from '../../../shared/grpc.js';
import { errors } from '../../../shared/errors.js';
import { cap } from '../../../shared/log.js';
import { callOf, type Reply, type RequestInfo } from '../http.js';
import { escapeHtml, page } from './html.js';
import type { PageDeps, PageKit, PageRoute } from './pages.js';
import { localPath } from './redirects.js';
import { hubUrl } from '../../../shared/urls.js';

export const STATE_COOKIE = 'hub-oauth-state';
/** How long a browser may spend at the provider's login before the state is stale. */
const STATE_MAX_AGE_SECONDS = 600;
/** CompleteExternalLogin makes two calls to the provider: the auth actor's budget for it (see proto/auth.proto). */
const COMPLETE_DEADLINE_FACTOR = 3;

/** The state cookie's sealed content: state, PKCE verifier, next (a local path or ""), when (epoch ms), nonce. */
interface SavedState { s: string; v: string; n: string; t: number; o: string }

export function externalLoginRoutes(deps: PageDeps, kit: PageKit): PageRoute[] {
  const { config, auth, web } = deps;
  const { redirect, html } = kit;

  const stateCookie = (info: RequestInfo, value: string, maxAgeSeconds: number) =>
    serializeCookie(STATE_COOKIE, value, { path: hubUrl('/hub/'), maxAgeSeconds, secure: web.isSecure(info) });

  function requireOauth(): void {
    if (config.Hub.authenticator_class !== 'oauth') throw errors.notFound('This hub does not log in through an external identity provider');
  }

  /** The state this browser was given, if it is ours (sealed under the cookie secret) and recent. */
  function savedState(info: RequestInfo): SavedState | null {
    const saved = web.sealer.open<SavedState>(parseCookies(info.headers.cookie)[STATE_COOKIE]);
    if (!saved || typeof saved.s !== 'string' || typeof saved.v !== 'string' || typeof saved.t !== 'number' || typeof saved.o !== 'string') return null;
    return Date.now() - saved.t < STATE_MAX_AGE_SECONDS * 1000 ? saved : null;
  }

  /** A sign-in that did not work: a readable page, a way to start again, and the used state forgotten. */
  function failed(info: RequestInfo, reply: Reply, message: string, status = 403): void {
    html(reply, status, page('Sign-in failed', `<p class="error">${escapeHtml(message)}</p><p><a href="${hubUrl('/hub/oauth_login')}">Sign in again</a></p>`),
      [stateCookie(info, '', 0)]);
  }

  return [
    {
      method: 'GET', pattern: /^\/hub\/oauth_login$/,
      async handle(info, reply) {
        requireOauth();
        const next = localPath(new URLSearchParams(info.query).get('next')) ?? '';
        if (await web.identify(info)) return redirect(reply, next || hubUrl('/hub/home'));
        const state = randomBytes(24).toString('base64url');
        const verifier = randomBytes(32).toString('base64url');
        const nonce = randomBytes(24).toString('base64url');
        const challenge = createHash('sha256').update(verifier).digest('base64url');
        const { url } = await auth.externalLoginUrl({ state, code_challenge: challenge, nonce }, callOf(info));
        const saved: SavedState = { s: state, v: verifier, n: next, t: Date.now(), o: nonce };
        redirect(reply, url, [stateCookie(info, web.sealer.seal(saved), STATE_MAX_AGE_SECONDS)]);
      },
    },
    {
      method: 'GET', pattern: /^\/hub\/oauth_callback$/, acts: true,
      async handle(info, reply) {
        requireOauth();
        const q = new URLSearchParams(info.query);
        const providerError = q.get('error');
        if (providerError) {
          const why = q.get('error_description');
          return failed(info, reply, `The identity provider did not sign you in: ${cap(providerError, 100)}${why ? ` (${cap(why, 300)})` : ''}`);
        }
        const code = q.get('code');
        const state = q.get('state');
        const saved = savedState(info);
        if (!code) return failed(info, reply, 'The identity provider sent no code.');
        if (!state || !saved || !macEquals(state, saved.s)) return failed(info, reply, 'This sign-in was not started here, or it took too long (state missing or different).');
        const r = await auth.completeExternalLogin({ code, code_verifier: saved.v, nonce: saved.o, remote_addr: info.remoteAddress },
          within(COMPLETE_DEADLINE_FACTOR * config.Hub.rpc_timeout * 1000, callOf(info)));
        // an outage of the provider is not a refusal: 503, so monitoring tells the two apart
        if (!r.ok) return failed(info, reply, r.message, r.unavailable ? 503 : 403);
        web.loggedIn(r.name);
        redirect(reply, localPath(saved.n) || hubUrl('/hub/home'), [...web.loginCookies(info, r.name, r.session_id), stateCookie(info, '', 0)]);
      },
    },
  ];
}
