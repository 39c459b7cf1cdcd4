// `shared-password`: one password for everyone (the established hub 5.3's SharedPasswordAuthenticator), for a
// workshop or a class where people need not be protected from each other: anyone with `user_password` logs in
// as any name that is not an admin's; admins (Authenticator.admin_users) log in only with `admin_password`;
// `password_groups` gives whoever logs in with one of its passwords those groups (with manage_groups).
import { macEquals as same } from '../../../shared/cookies.js';
import type { AuthenticatorFactory } from './contract.js';

const USER_PASSWORD_MIN = 8;
const ADMIN_PASSWORD_MIN = 32;

export const createSharedPasswordAuthenticator: AuthenticatorFactory = ({ config }) => {
  const S = config.SharedPasswordAuthenticator;
  const groupsByPassword = Object.entries(S.password_groups as Record<string, string[]>);
  const admins = new Set(config.Authenticator.admin_users);

  return {
    offer: { form: true },
    admitsAllByDefault: false,
    hasAllowRule: false,

    configProblems() {
      const problems: string[] = [];
      if (S.user_password && S.user_password.length < USER_PASSWORD_MIN) problems.push(`SharedPasswordAuthenticator.user_password: at least ${USER_PASSWORD_MIN} characters`);
      if (S.admin_password && S.admin_password.length < ADMIN_PASSWORD_MIN) problems.push(`SharedPasswordAuthenticator.admin_password: at least ${ADMIN_PASSWORD_MIN} characters`);
      if (S.admin_password && S.admin_password === S.user_password) problems.push('SharedPasswordAuthenticator.admin_password: must differ from user_password');
      for (const [password, groups] of groupsByPassword) {
        if (password.length < USER_PASSWORD_MIN) problems.push(`SharedPasswordAuthenticator.password_groups: each password at least ${USER_PASSWORD_MIN} characters`);
        if (!Array.isArray(groups) || !groups.every((g) => typeof g === 'string')) problems.push('SharedPasswordAuthenticator.password_groups: password -> a list of group names');
        if (password === S.admin_password) problems.push('SharedPasswordAuthenticator.password_groups: a password must differ from admin_password');
      }
      if (groupsByPassword.length && !config.Authenticator.manage_groups) problems.push('SharedPasswordAuthenticator.password_groups: needs Authenticator.manage_groups');
      if (!S.user_password && !S.admin_password && !groupsByPassword.length) problems.push('SharedPasswordAuthenticator: set user_password, admin_password or password_groups (nobody can log in otherwise)');
      return problems;
    },

    async authenticate({ hubName, password }) {
      if (admins.has(hubName)) {
        // an admin's name opens only with the admin password: never with the one everybody knows
        return S.admin_password && same(password, S.admin_password) ? { ok: true, identity: { name: hubName, admin: true, groups: [] } } : { ok: false, reason: 'invalid credentials' };
      }
      if (S.user_password && same(password, S.user_password)) return { ok: true, identity: { name: hubName, admin: false, groups: [] } };
      for (const [groupPassword, groups] of groupsByPassword) {
        if (same(password, groupPassword)) return { ok: true, identity: { name: hubName, groups } };
      }
      return { ok: false, reason: 'invalid credentials' };
    },
  };
};
