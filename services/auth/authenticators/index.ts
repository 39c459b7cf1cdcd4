// Hub.authenticator_class → its backend, loaded only when chosen (a hub on passwords never loads libpam, an LDAP
// client or an OpenID client). A new backend: one file in this folder, its config section, one line here.
import type { Authenticator, AuthenticatorDeps } from './contract.js';

const BACKENDS: Record<string, () => Promise<(deps: AuthenticatorDeps) => Authenticator>> = {
  password: async () => (await import('./password.js')).createPasswordAuthenticator,
  dummy: async () => (await import('./dummy.js')).createDummyAuthenticator,
  pam: async () => (await import('./pam.js')).createPamAuthenticator,
  ldap: async () => (await import('./ldap.js')).createLdapAuthenticator,
  oauth: async () => (await import('./oauth.js')).createOAuthenticator,
  'shared-password': async () => (await import('./shared-password.js')).createSharedPasswordAuthenticator,
};

/**
 * The chosen backend's configuration problems, for the supervisor to refuse the start with them (as it does the
 * spawner's) rather than have the auth actor die at each restart. Loads only that backend.
 */
export async function authenticatorProblems(config: AuthenticatorDeps['config'], log: AuthenticatorDeps['log']): Promise<string[]> {
  const load = BACKENDS[config.Hub.authenticator_class];
  if (!load) return [`Hub.authenticator_class: no authenticator named ${JSON.stringify(config.Hub.authenticator_class)}`];
  const backend = (await load())({ config, log, passwordOf: () => Promise.reject(new Error('the preflight reads no passwords')) });
  try {
    return (backend.configProblems?.() ?? []).map((p) => `authenticator_class "${config.Hub.authenticator_class}": ${p}`);
  } finally {
    await backend.close?.();
  }
}

export async function loadAuthenticator(kind: string, deps: AuthenticatorDeps): Promise<Authenticator> {
  const load = BACKENDS[kind];
  if (!load) throw new Error(`Hub.authenticator_class: no authenticator named ${JSON.stringify(kind)} (known: ${Object.keys(BACKENDS).join(', ')})`);
  const authenticator = (await load())(deps);
  const problems = authenticator.configProblems?.() ?? [];
  if (problems.length) throw new Error(`authenticator_class "${kind}" needs: ${problems.join('; ')}`);
  if (!deps.config.Authenticator.password_form || authenticator.authenticate) return authenticator;
  // Authenticator.password_form: beside the provider's button, the hub's own passwords (a break-glass admin)
  const passwords = (await BACKENDS.password())(deps);
  return { ...authenticator, offer: { ...authenticator.offer, form: true }, authenticate: passwords.authenticate };
}
