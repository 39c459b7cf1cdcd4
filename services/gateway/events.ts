// Domain events that make the gateway's caches stale (subjects from shared/subjects.ts).
import { collectAfterBurst } from '../../shared/idle-gc.js';
import { parseEventSubject } from '../../shared/subjects.js';
import type { IdentityCache, UserCache } from './caches.js';
import type { WebSessions } from './web/sessions.js';

interface Caches { identities: IdentityCache; users: UserCache; web: WebSessions }

export function applyEvent(subject: string, body: any, { identities, users, web }: Caches): void {
  const { entity, change } = parseEventSubject(subject);
  if (entity === 'token' && change === 'revoked') identities.forgetToken(body.token_id);
  else if (entity === 'owner' && change === 'changed') {
    identities.forgetOwner({ kind: body.kind, name: body.name });
    if (body.kind === 'user') {
      users.forget(body.name);
      web.forgetUser(body.name);
    }
  } else if (entity === 'session' && change === 'revoked') web.forgetSession(body.session_id);
  else if (entity === 'user' && change === 'activity' && typeof body.last_activity === 'string') users.touch(body.name, body.last_activity);
  else if (entity === 'user') {
    users.forget(body.name);
    if (change === 'created') collectAfterBurst(); // a bulk create is thousands of these: collect once they stop
  }
  else if (entity === 'group') for (const name of body.users ?? []) users.forget(name);
}
