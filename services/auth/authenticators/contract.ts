// The Authenticator contract: what one way of logging in (password, dummy, pam, ldap, oauth) must do. A backend
// checks credentials (a form) or runs a redirect flow (a "Sign in with …" button), and says who the person is
// with what it knows: its own view of admin and of allowed (its *_groups options), the groups it sees, and what
// to keep as auth state. Everything shared — lower-casing and Authenticator.username_map, allowed_users,
// admin_users, allow_all, allow_existing_users, manage_groups, auth state, refresh, lockouts, audit — lives once
// above it, in ../identity.ts. A new backend is one file here plus its section in shared/config.ts and one line
// in ./index.ts.
import type { HubConfig } from '../../../shared/config.js';
import type { Logger } from '../../../shared/log.js';

/** Who a backend says the person is. */
export interface Identity {
  /** the name as the backend knows it; the layer above lower-cases it and applies Authenticator.username_map */
  name: string;
  /** the backend's own word on admin (e.g. admin_groups matched); undefined: no opinion (admin_users decides) */
  admin?: boolean;
  /**
   * the backend's own allow rule (e.g. allowed_groups): true admits the person even when allowed_users does
   * not name them; false refuses them whatever the lists say; undefined: no rule of its own
   */
  allowed?: boolean;
  /** the groups the backend sees the person in (hub group names); undefined: it knows none (manage_groups leaves them) */
  groups?: string[];
  /** the hub roles the backend gives the person (Authenticator.manage_roles); undefined: it says nothing of roles */
  roles?: string[];
  /** what the login returned, kept encrypted as the user's auth state when Authenticator.enable_auth_state */
  authState?: Record<string, unknown>;
  /** the person's e-mail address, when the backend knows it */
  email?: string;
  /**
   * what clients show of the person (the established hub 6's `user_info`): display_name, initials, avatar_url,
   * color — only what the backend knows; undefined: it knows nothing (what the hub holds stays)
   */
  userInfo?: Record<string, string>;
}

/** A backend's answer: who, or why not. */
export type Verdict =
  | { ok: true; identity: Identity }
  | {
    ok: false;
    /** for the audit trail and the log: never a password or a token */
    reason: string;
    /** safe to show the person; the layer above words the usual cases itself when absent */
    message?: string;
    /** the backend could not decide (directory or provider down, too slow): an outage, not a refusal */
    unavailable?: boolean;
  };

/** Every call carries the time by which it must have answered (epoch ms), within Hub.rpc_timeout. */
export interface CallContext {
  deadline: number;
  log: Logger;
}

/** How the login page offers this backend. */
export interface LoginOffer {
  /** a name-and-password form */
  form: boolean;
  /** a "Sign in with <login_service>" button starting a redirect flow; absent: none */
  button?: string;
}

export interface Authenticator {
  readonly offer: LoginOffer;
  /**
   * With no allow option set at all (allow_all, allowed_users, allowed_groups, allow_existing_users), whether
   * everyone it accepts may log in: true for `password` (an admin gave each password) and `dummy` (demos);
   * false for directories and providers that know far more people than the hub should admit.
   */
  readonly admitsAllByDefault: boolean;
  /** Whether the backend has an allow rule of its own configured (allowed_groups), for the check above. */
  readonly hasAllowRule: boolean;

  /**
   * Form backends: a name and a password. `username` is the name as typed (trimmed: what a directory or PAM
   * knows); `hubName` is it as the hub names users (lower-cased, Authenticator.username_map applied).
   */
  authenticate?(credentials: { username: string; hubName: string; password: string }, ctx: CallContext): Promise<Verdict>;

  /** Redirect backends: where to send the browser. `state`, the PKCE challenge (S256) and `nonce` come from above. */
  loginUrl?(r: { state: string; codeChallenge: string; nonce: string; redirectUri: string }): Promise<string>;
  /** Redirect backends: the callback's code, exchanged and checked (the id_token's nonce against `nonce`). */
  completeLogin?(r: { code: string; codeVerifier: string; nonce: string; redirectUri: string }, ctx: CallContext): Promise<Verdict>;

  /**
   * Asks again about someone who logged in earlier (after Authenticator.auth_refresh_age, and before a spawn with
   * refresh_pre_spawn), given the auth state of that login. A verdict replaces what the login said (groups, admin,
   * auth state); `null`: nothing new to ask (the login stands, judged again by the lists above).
   */
  refresh?(user: { name: string; authState: Record<string, unknown> | null }, ctx: CallContext): Promise<Verdict | null>;

  /** Where the browser goes after the hub's own logout (RP-initiated logout); absent: the hub's login page. */
  logoutUrl?(r: { authState: Record<string, unknown> | null; postLogoutRedirectUri: string }): Promise<string | undefined>;

  /** Problems with the backend's configuration section; the auth actor refuses to start on any. */
  configProblems?(): string[];

  close?(): Promise<void>;
}

/** What a backend's factory gets: the whole (validated, frozen) configuration and the actor's logger. */
export interface AuthenticatorDeps {
  config: HubConfig;
  log: Logger;
  /** the scrypt hash of a hub user's own password, if they have one (the `password` backend) */
  passwordOf: (hubName: string) => Promise<string | undefined>;
}

export type AuthenticatorFactory = (deps: AuthenticatorDeps) => Authenticator;
