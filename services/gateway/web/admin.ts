// The admin page, /hub/admin: a shell the browser fills from the REST API (static/admin.js), so every
// read is a page of the API (server-side search, sort and paging) and every write carries the session's
// XSRF token. Who may open it is decided as the established hub does: the `admin-ui` scope; each action
// shown needs its own scope (checked again by the API).
import { hasScope } from '../../../shared/scopes.js';
import { holdsAdminScopes } from '../api/deps.js';
import type { PageDeps, PageKit, PageRoute } from './pages.js';
import { assetUrl, escapeHtml, page } from './html.js';
import { hubUrl } from '../../../shared/urls.js';

/** What the page's script needs: the XSRF token and which actions to offer (never a secret beyond the session's own). */
export interface AdminPageData {
  xsrf: string;
  /** the REST API's path (under Hub.base_url) */
  api: string;
  me: string;
  namedServers: boolean;
  can: { editUsers: boolean; grantAdmin: boolean; startServers: boolean; stopServers: boolean; editGroups: boolean; editMembers: boolean; deleteGroups: boolean };
  /** Authenticator.manage_groups */
  groupsManaged: boolean;
}

const SHELL = `<link rel="stylesheet" href="${escapeHtml(assetUrl('admin.css'))}">
<div class="tabs" role="tablist"><button type="button" role="tab" data-view="users">Users</button><button type="button" role="tab" data-view="groups">Groups</button></div>
<p id="admin-status" role="status" aria-live="polite"></p>
<section id="admin-users" aria-label="Users">
<div class="toolbar">
<input id="user-search" type="search" placeholder="Search users" aria-label="Search users by name" autocomplete="off">
<label class="inline"><input id="only-active" type="checkbox"> Only active servers</label>
<span class="spacer"></span>
<button type="button" id="add-users" class="primary">Add users</button>
<button type="button" id="stop-all" class="danger">Stop all</button>
</div>
<table id="user-table"><thead><tr>
<th><button type="button" class="sort" data-sort="name" data-label="User">User</button></th><th>Groups</th>
<th><button type="button" class="sort" data-sort="last_activity" data-label="Last activity">Last activity</button></th>
<th>Server</th><th>State</th><th>Server activity</th><th>Started</th><th></th>
</tr></thead></table>
<div class="pager"><button type="button" id="user-prev">‹ Previous</button><span id="user-page-info" class="muted"></span><button type="button" id="user-next">Next ›</button>
<label class="inline">Per page <select id="page-size"><option>25</option><option>50</option><option>100</option><option>200</option></select></label></div>
</section>
<section id="admin-groups" aria-label="Groups" hidden>
<form id="create-group" class="toolbar"><input id="new-group" placeholder="new group name" aria-label="New group name" autocomplete="off" required><button type="submit" class="primary">Create group</button></form>
<div id="group-list"></div>
<div class="pager"><button type="button" id="group-prev">‹ Previous</button><span id="group-page-info" class="muted"></span><button type="button" id="group-next">Next ›</button></div>
</section>`;

export function adminRoutes(deps: PageDeps, kit: PageKit): PageRoute[] {
  const { web, config, book } = deps;
  return [{
    method: 'GET', pattern: /^\/hub\/admin\/?$/,
    async handle(info, reply) {
      const id = await kit.requireLogin(info, reply);
      if (!id) return;
      if (!hasScope(id.scopes, 'admin-ui')) {
        return kit.html(reply, 403, page('Forbidden', `<p class="error">The admin page is for administrators (it needs the <code>admin-ui</code> scope).</p><p><a class="button" href="${hubUrl('/hub/home')}">Back to the hub</a></p>`, kit.nav(id)));
      }
      const data: AdminPageData = {
        xsrf: web.xsrfFor(id.sessionId),
        api: hubUrl('/hub/api'),
        me: id.owner.name,
        namedServers: config.Hub.allow_named_servers,
        can: {
          editUsers: hasScope(id.scopes, 'admin:users'),
          grantAdmin: holdsAdminScopes(id.scopes, book),
          startServers: hasScope(id.scopes, 'start:servers'),
          stopServers: hasScope(id.scopes, 'delete:servers'),
          editGroups: hasScope(id.scopes, 'groups'),
          // Authenticator.manage_groups: memberships follow the authenticator; the page shows them read-only
          editMembers: hasScope(id.scopes, 'groups') && !config.Authenticator.manage_groups,
          deleteGroups: hasScope(id.scopes, 'delete:groups') && !config.Authenticator.manage_groups,
        },
        groupsManaged: config.Authenticator.manage_groups,
      };
      kit.html(reply, 200, page('Admin', SHELL, kit.nav(id), { scripts: ['admin.js'], data }));
    },
  }];
}
