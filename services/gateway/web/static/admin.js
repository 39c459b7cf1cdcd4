// The admin page (/hub/admin): users with their servers, and groups. Every read and write goes through
// the REST API (/hub/api) with the login cookie and the session's XSRF token (X-XSRFToken header).
// Names, properties and messages reach the page only as text (textContent, .value, dataset), never as
// HTML, so `<img src=x>` or `o'brien` are shown as typed and their buttons work like any other.
'use strict';
(() => {
  const main = document.querySelector('main');
  const cfg = JSON.parse(main.dataset.page || '{}');
  const $ = (sel) => main.querySelector(sel);
  const seg = encodeURIComponent;
  const PAGED = 'application/hub-pagination+json';
  const SORTS = ['id', 'name', '-name', 'last_activity', '-last_activity'];
  const PAGE_SIZES = [25, 50, 100, 200];
  /** re-asks while a shown server is starting or stopping, at most this many times in a row */
  const MAX_POLLS = 90;

  // ---------- small helpers ----------

  /** An element; string and number children become text nodes, `on*` attrs become listeners. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else if (k === 'class') node.className = v;
      else if (k === 'data') Object.assign(node.dataset, v);
      else if (k in node && typeof v !== 'string') node[k] = v;
      else node.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
    return node;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: `${PAGED}, application/json`, 'X-XSRFToken': cfg.xsrf };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const r = await fetch(`${cfg.api}${path}`, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (r.status === 403 && data && /_xsrf|credentials/i.test(data.message || '')) throw new ApiError(403, 'Your login has ended or the page is stale: reload the page.');
    if (!r.ok) throw new ApiError(r.status, (data && data.message) || `${r.status} ${r.statusText}`);
    return data;
  }

  const status = $('#admin-status');
  function say(message, kind = 'ok') {
    status.className = kind;
    status.textContent = message;
  }
  /** Runs an action from a button: the button is disabled meanwhile; failures are shown, not thrown. */
  async function act(button, work) {
    if (button) button.disabled = true;
    try {
      return await work();
    } catch (e) {
      say(e instanceof ApiError ? e.message : `Failed: ${e.message}`, 'error');
      return undefined;
    } finally {
      if (button) button.disabled = false;
    }
  }

  const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
  function ago(iso) {
    if (!iso) return el('span', { class: 'muted' }, 'never');
    const s = (Date.parse(iso) - Date.now()) / 1000;
    const [n, unit] = Math.abs(s) < 60 ? [s, 'second'] : Math.abs(s) < 3600 ? [s / 60, 'minute'] : Math.abs(s) < 86400 ? [s / 3600, 'hour'] : [s / 86400, 'day'];
    return el('time', { datetime: iso, title: iso }, rtf.format(Math.round(n), unit));
  }

  function serverState(s) {
    if (!s) return 'stopped';
    if (s.ready) return 'running';
    if (s.pending === 'spawn') return 'starting';
    if (s.pending === 'stop') return 'stopping';
    return 'stopped';
  }

  const serverPath = (user, name) => (name ? `/users/${seg(user)}/servers/${seg(name)}` : `/users/${seg(user)}/server`);

  /** A modal dialog built from `content`; resolves with the value its buttons give (null on cancel). */
  function modal(title, content, buttons) {
    return new Promise((resolve) => {
      const dlg = el('dialog', { class: 'admin-dialog', 'aria-label': title });
      const close = (value) => {
        dlg.close();
        dlg.remove();
        resolve(value);
      };
      const row = el('div', { class: 'actions' }, buttons.map((b) => el('button', {
        type: b.submit ? 'submit' : 'button', class: b.class, data: { action: b.action || '' },
        onclick: async (ev) => {
          ev.preventDefault();
          if (!b.run) return close(null);
          const v = await b.run(ev.currentTarget);
          if (v !== undefined) close(v);
        },
      }, b.label)));
      dlg.append(el('form', { method: 'dialog' }, el('h2', {}, title), content, el('p', { class: 'error dialog-error', role: 'alert' }), row));
      dlg.addEventListener('cancel', (ev) => {
        ev.preventDefault();
        close(null);
      });
      document.body.append(dlg);
      dlg.showModal();
    });
  }
  const dialogError = (button, message) => {
    button.closest('dialog').querySelector('.dialog-error').textContent = message;
  };
  /** A dialog's API call: its button disabled meanwhile, a refusal shown in the dialog (which stays open). */
  const busyWith = async (button, work) => {
    button.disabled = true;
    try {
      return await work();
    } catch (e) {
      return dialogError(button, e.message);
    } finally {
      button.disabled = false;
    }
  };
  const confirmAction = (title, message, label) => modal(title, el('p', {}, message), [
    { label: 'Cancel' },
    { label, class: 'danger', action: 'confirm', submit: true, run: async () => true },
  ]);

  // ---------- state in the URL, so a reload or a shared link shows the same page ----------

  const state = { view: 'users', q: '', active: false, sort: 'id', offset: 0, limit: 50, goffset: 0 };
  function readUrl() {
    const p = new URLSearchParams(location.search);
    state.view = p.get('view') === 'groups' ? 'groups' : 'users';
    state.q = p.get('q') || '';
    state.active = p.get('active') === '1';
    state.sort = SORTS.includes(p.get('sort')) ? p.get('sort') : 'id';
    state.offset = Math.max(0, Number.parseInt(p.get('offset') || '0', 10) || 0);
    const limit = Number.parseInt(p.get('limit') || '', 10);
    state.limit = PAGE_SIZES.includes(limit) ? limit : 50;
    state.goffset = Math.max(0, Number.parseInt(p.get('goffset') || '0', 10) || 0);
  }
  function writeUrl(push) {
    const p = new URLSearchParams();
    if (state.view !== 'users') p.set('view', state.view);
    if (state.q) p.set('q', state.q);
    if (state.active) p.set('active', '1');
    if (state.sort !== 'id') p.set('sort', state.sort);
    if (state.offset) p.set('offset', String(state.offset));
    if (state.limit !== 50) p.set('limit', String(state.limit));
    if (state.goffset) p.set('goffset', String(state.goffset));
    const query = p.toString();
    const url = `${location.pathname}${query ? `?${query}` : ''}`;
    if (push) history.pushState(null, '', url);
    else history.replaceState(null, '', url);
  }

  // ---------- users ----------

  const usersView = $('#admin-users');
  const groupsView = $('#admin-groups');
  const userTable = $('#user-table');
  const search = $('#user-search');
  const onlyActive = $('#only-active');
  const pageSize = $('#page-size');
  const pageInfo = $('#user-page-info');
  const prev = $('#user-prev');
  const next = $('#user-next');
  let loadSeq = 0;
  let polls = 0;
  let pollTimer = null;
  let lastTotal = 0;

  /** `retry`: once, when the page asked for lies past the end (users deleted meanwhile), the last page is shown instead. */
  async function loadUsers(retry = true) {
    const seq = ++loadSeq;
    clearTimeout(pollTimer);
    const q = new URLSearchParams({ offset: String(state.offset), limit: String(state.limit), include_stopped_servers: '1' });
    if (state.q) q.set('name_filter', state.q);
    if (state.sort !== 'id') q.set('sort', state.sort);
    if (state.active) q.set('state', 'active');
    let page;
    try {
      page = await api('GET', `/users?${q}`);
    } catch (e) {
      if (seq === loadSeq) say(e.message, 'error');
      return;
    }
    if (seq !== loadSeq) return; // a newer search or page was asked for meanwhile
    const { items, _pagination: pg } = page;
    if (retry && !items.length && pg.total && state.offset >= pg.total) {
      // the page emptied (deletions, a narrower search): show the last one that has users
      state.offset = Math.max(0, Math.floor((pg.total - 1) / state.limit) * state.limit);
      writeUrl(false);
      return loadUsers(false);
    }
    lastTotal = pg.total;
    for (const old of userTable.querySelectorAll('tbody')) old.remove();
    userTable.append(...items.map(userRows));
    if (!items.length) userTable.append(el('tbody', {}, el('tr', {}, el('td', { colspan: 8, class: 'muted' }, state.q ? `No user's name contains “${state.q}”.` : 'No users.'))));
    pageInfo.textContent = pg.total ? `${pg.offset + 1}–${pg.offset + items.length} of ${pg.total}` : '0 users';
    prev.disabled = pg.offset === 0;
    next.disabled = !pg.next;
    for (const b of main.querySelectorAll('#user-table th button[data-sort]')) {
      const key = b.dataset.sort;
      const on = state.sort === key || state.sort === `-${key}`;
      b.setAttribute('aria-sort', on ? (state.sort.startsWith('-') ? 'descending' : 'ascending') : 'none');
      b.textContent = `${b.dataset.label}${on ? (state.sort.startsWith('-') ? ' ▼' : ' ▲') : ''}`;
    }
    const busy = items.some((u) => Object.values(u.servers || {}).some((s) => s.pending));
    if (busy && polls++ < MAX_POLLS) pollTimer = setTimeout(() => void loadUsers(), 1000);
    else if (!busy) polls = 0;
  }

  function serverCells(user, name, server) {
    const st = serverState(server);
    const profile = server && server.user_options && server.user_options.profile;
    const buttons = [];
    if (cfg.can.startServers && (st === 'stopped')) {
      buttons.push(el('button', { class: 'primary', data: { action: 'start' }, onclick: (ev) => startServer(ev.currentTarget, user.name, name) }, 'Start'));
    }
    if (cfg.can.stopServers && st !== 'stopped') {
      buttons.push(el('button', { class: 'danger', data: { action: 'stop' }, onclick: (ev) => stopServer(ev.currentTarget, user.name, name) }, 'Stop'));
    }
    if (st === 'running' && typeof server.url === 'string' && server.url.startsWith('/')) {
      buttons.push(el('a', { class: 'button', href: server.url, target: '_blank', rel: 'noopener', data: { action: 'open' } }, 'Open'));
    }
    if (name && st === 'stopped' && cfg.can.stopServers) {
      buttons.push(el('button', { class: 'danger', data: { action: 'delete-server' }, title: 'Forget this named server', onclick: (ev) => deleteServer(ev.currentTarget, user.name, name) }, 'Delete'));
    }
    return [
      el('td', {}, el('span', { class: `state ${st}` }, st), profile ? el('span', { class: 'muted profile' }, ` ${typeof profile === 'string' ? profile : JSON.stringify(profile)}`) : null),
      el('td', {}, server && server.last_activity ? ago(server.last_activity) : el('span', { class: 'muted' }, '—')),
      el('td', {}, server && server.started && st !== 'stopped' ? ago(server.started) : el('span', { class: 'muted' }, '—')),
      el('td', {}, el('div', { class: 'actions' }, buttons)),
    ];
  }

  /** One <tbody> per user: the user's row (with the default server), then a row per named server. */
  function userRows(user) {
    const servers = user.servers || {};
    const named = Object.keys(servers).filter((n) => n).sort();
    const edit = cfg.can.editUsers ? el('button', { data: { action: 'edit' }, onclick: () => editUser(user) }, 'Edit') : null;
    const first = el('tr', { class: 'user-row' },
      el('td', { class: 'name' }, el('span', { class: 'username' }, user.name), user.admin ? el('span', { class: 'badge' }, 'admin') : null),
      el('td', { class: 'groups' }, (user.groups || []).length ? user.groups.join(', ') : el('span', { class: 'muted' }, '—')),
      el('td', {}, ago(user.last_activity)),
      el('td', { class: 'muted' }, 'default'),
      ...serverCells(user, '', servers['']),
    );
    first.lastElementChild.firstElementChild.append(...[edit].filter(Boolean));
    const rows = [first, ...named.map((n) => el('tr', { class: 'server-row', data: { server: n } },
      el('td', {}), el('td', {}), el('td', {}),
      el('td', { class: 'server-name' }, n),
      ...serverCells(user, n, servers[n]),
    ))];
    return el('tbody', { class: 'user', data: { user: user.name } }, rows);
  }

  function startServer(button, user, name) {
    return act(button, async () => {
      await api('POST', serverPath(user, name), {});
      say(`Starting ${name ? `${user}/${name}` : `${user}'s server`}…`);
      polls = 0;
      await loadUsers();
    });
  }

  function stopServer(button, user, name) {
    return act(button, async () => {
      await api('DELETE', serverPath(user, name));
      say(`Stopping ${name ? `${user}/${name}` : `${user}'s server`}…`);
      polls = 0;
      await loadUsers();
    });
  }

  /** A stopped named server is kept (as the established hub keeps them) until it is deleted. */
  async function deleteServer(button, user, name) {
    if (!(await confirmAction('Delete server', `Delete server “${name}” of ${user}?`, 'Delete'))) return;
    await act(button, async () => {
      await api('DELETE', serverPath(user, name), { remove: true });
      say(`Deleted server ${user}/${name}.`);
      await loadUsers();
    });
  }

  async function editUser(user) {
    const nameInput = el('input', { name: 'name', value: user.name, required: true, autocomplete: 'off' });
    nameInput.value = user.name;
    const admin = el('input', { type: 'checkbox', name: 'admin', checked: Boolean(user.admin) });
    const serverName = el('input', { name: 'server', placeholder: 'server name', autocomplete: 'off' });
    const content = el('div', {},
      el('label', {}, 'Name ', nameInput),
      el('label', {}, admin, ' Admin'),
      cfg.namedServers && cfg.can.startServers
        ? el('fieldset', {}, el('legend', {}, 'Start a named server'), serverName, ' ',
          el('button', { type: 'button', data: { action: 'start-named' }, onclick: (ev) => {
            const n = serverName.value.trim();
            if (!n) return dialogError(ev.currentTarget, 'Enter a server name.');
            ev.currentTarget.closest('dialog').close();
            ev.currentTarget.closest('dialog').remove();
            void startServer(null, user.name, n);
          } }, 'Start'))
        : null,
    );
    const done = await modal(`Edit user ${user.name}`, content, [
      { label: 'Delete user', class: 'danger', action: 'delete-user', run: async (b) => {
        if (user.name === cfg.me) return dialogError(b, 'You cannot delete yourself.');
        const really = await confirmAction('Delete user', `Delete ${user.name} and stop their servers?`, 'Delete user');
        if (!really) return undefined;
        return busyWith(b, async () => {
          await api('DELETE', `/users/${seg(user.name)}`);
          return `Deleted ${user.name}.`;
        });
      } },
      { label: 'Cancel' },
      { label: 'Save', class: 'primary', action: 'save', submit: true, run: async (b) => {
        const change = {};
        const newName = nameInput.value.trim();
        if (!newName) return dialogError(b, 'The name cannot be empty.');
        if (newName !== user.name) change.name = newName;
        if (admin.checked !== Boolean(user.admin)) change.admin = admin.checked;
        if (!Object.keys(change).length) return 'No change.';
        return busyWith(b, async () => {
          const u = await api('PATCH', `/users/${seg(user.name)}`, change);
          return `Saved ${u.name}${u.admin ? ' (admin)' : ''}.`;
        });
      } },
    ]);
    if (typeof done === 'string') {
      say(done);
      await loadUsers();
    }
  }

  async function addUsers() {
    const names = el('textarea', { name: 'usernames', rows: 6, placeholder: 'one name per line', autocomplete: 'off' });
    const admin = el('input', { type: 'checkbox', name: 'admin' });
    const done = await modal('Add users', el('div', {},
      el('label', {}, 'Names, one per line', el('br'), names),
      cfg.can.grantAdmin ? el('label', {}, admin, ' Admin') : null,
    ), [
      { label: 'Cancel' },
      { label: 'Add users', class: 'primary', action: 'add', submit: true, run: async (b) => {
        const list = [...new Set(names.value.split('\n').map((s) => s.trim()).filter(Boolean))];
        if (!list.length) return dialogError(b, 'Enter at least one name.');
        return busyWith(b, async () => {
          const created = await api('POST', '/users', { usernames: list, admin: admin.checked });
          const skipped = list.length - created.length;
          return `Added ${created.length} user${created.length === 1 ? '' : 's'}${skipped ? ` (${skipped} existed already)` : ''}.`;
        });
      } },
    ]);
    if (typeof done === 'string') {
      say(done);
      await loadUsers();
    }
  }

  /** Every active server of every user, a page of users at a time (bounded by the total seen first). */
  async function stopAll(button) {
    if (!(await confirmAction('Stop all servers', 'Stop every running server of every user?', 'Stop all'))) return;
    await act(button, async () => {
      const targets = [];
      let offset = 0;
      let total = Infinity;
      for (let pages = 0; offset < total && pages < 1000; pages++) {
        const pg = await api('GET', `/users?state=active&offset=${offset}&limit=200`);
        total = pg._pagination.total;
        for (const u of pg.items) for (const [name, s] of Object.entries(u.servers || {})) if (s.ready || s.pending === 'spawn') targets.push([u.name, name]);
        if (!pg._pagination.next) break;
        offset = pg._pagination.next.offset;
      }
      let failed = 0;
      // a few at a time: each stop waits for its process to end
      for (let i = 0; i < targets.length; i += 8) {
        const results = await Promise.allSettled(targets.slice(i, i + 8).map(([u, n]) => api('DELETE', serverPath(u, n))));
        failed += results.filter((r) => r.status === 'rejected').length;
      }
      say(`Stopping ${targets.length - failed} server${targets.length - failed === 1 ? '' : 's'}${failed ? `; ${failed} could not be stopped` : ''}.`, failed ? 'error' : 'ok');
      polls = 0;
      await loadUsers();
    });
  }

  let searchTimer = null;
  search.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      state.q = search.value.trim();
      state.offset = 0;
      writeUrl(false);
      void loadUsers();
    }, 200);
  });
  onlyActive.addEventListener('change', () => {
    state.active = onlyActive.checked;
    state.offset = 0;
    writeUrl(false);
    void loadUsers();
  });
  pageSize.addEventListener('change', () => {
    state.limit = Number(pageSize.value);
    state.offset = 0;
    writeUrl(false);
    void loadUsers();
  });
  prev.addEventListener('click', () => {
    state.offset = Math.max(0, state.offset - state.limit);
    writeUrl(true);
    void loadUsers();
  });
  next.addEventListener('click', () => {
    if (state.offset + state.limit >= lastTotal) return;
    state.offset += state.limit;
    writeUrl(true);
    void loadUsers();
  });
  for (const b of main.querySelectorAll('#user-table th button[data-sort]')) {
    b.addEventListener('click', () => {
      const key = b.dataset.sort;
      // first click: names A→Z, activity newest first; a second click reverses
      const first = key === 'last_activity' ? '-last_activity' : key;
      state.sort = state.sort === first ? (first.startsWith('-') ? key : `-${key}`) : first;
      state.offset = 0;
      writeUrl(false);
      void loadUsers();
    });
  }
  $('#add-users').addEventListener('click', () => void addUsers());
  $('#stop-all').addEventListener('click', (ev) => void stopAll(ev.currentTarget));

  // ---------- groups ----------

  const groupList = $('#group-list');
  const GROUP_PAGE = 20;

  async function loadGroups() {
    let pg;
    try {
      pg = await api('GET', `/groups?offset=${state.goffset}&limit=${GROUP_PAGE}`);
    } catch (e) {
      return say(e.message, 'error');
    }
    groupList.replaceChildren(...pg.items.map(groupCard));
    if (!pg.items.length) groupList.append(el('p', { class: 'muted' }, 'No groups yet.'));
    $('#group-page-info').textContent = pg._pagination.total ? `${pg._pagination.offset + 1}–${pg._pagination.offset + pg.items.length} of ${pg._pagination.total}` : '';
    $('#group-prev').disabled = state.goffset === 0;
    $('#group-next').disabled = !pg._pagination.next;
  }

  function groupCard(g) {
    const memberInput = el('input', { name: 'member', placeholder: 'user name', autocomplete: 'off' });
    const props = el('textarea', { name: 'properties', rows: 3, spellcheck: 'false' });
    props.value = JSON.stringify(g.properties || {}, null, 2);
    const members = (g.users || []).map((u) => el('li', { data: { member: u } },
      el('span', {}, u), ' ',
      cfg.can.editMembers ? el('button', { class: 'link danger', 'aria-label': `Remove ${u} from ${g.name}`, data: { action: 'remove-member' }, onclick: (ev) => act(ev.currentTarget, async () => {
        await api('DELETE', `/groups/${seg(g.name)}/users`, { users: [u] });
        say(`Removed ${u} from ${g.name}.`);
        await loadGroups();
      }) }, '×') : null));
    const addMember = (ev) => {
      ev.preventDefault();
      const names = memberInput.value.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
      if (!names.length) return undefined;
      return act(ev.currentTarget.querySelector('button') || null, async () => {
        await api('POST', `/groups/${seg(g.name)}/users`, { users: names });
        say(`Added ${names.join(', ')} to ${g.name}.`);
        await loadGroups();
      });
    };
    return el('section', { class: 'card group', data: { group: g.name } },
      el('div', { class: 'group-head' }, el('h3', {}, g.name), el('span', { class: 'muted' }, `${(g.users || []).length} member${(g.users || []).length === 1 ? '' : 's'}`),
        cfg.can.deleteGroups ? el('button', { class: 'danger', data: { action: 'delete-group' }, onclick: async (ev) => {
          const b = ev.currentTarget;
          if (!(await confirmAction('Delete group', `Delete group ${g.name}?`, 'Delete group'))) return;
          await act(b, async () => {
            await api('DELETE', `/groups/${seg(g.name)}`);
            say(`Deleted group ${g.name}.`);
            await loadGroups();
          });
        } }, 'Delete group') : null),
      el('ul', { class: 'members' }, members.length ? members : el('li', { class: 'muted' }, 'no members')),
      cfg.can.editMembers ? el('form', { class: 'actions', data: { form: 'add-member' }, onsubmit: addMember }, memberInput, el('button', { type: 'submit', data: { action: 'add-member' } }, 'Add member')) : null,
      el('details', { class: 'properties' }, el('summary', {}, 'Properties'), props,
        cfg.can.editGroups ? el('div', { class: 'actions' }, el('button', { data: { action: 'save-properties' }, onclick: (ev) => act(ev.currentTarget, async () => {
          let value;
          try {
            value = JSON.parse(props.value || '{}');
          } catch (e) {
            throw new Error(`properties of ${g.name} are not valid JSON (${e.message})`);
          }
          if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error(`properties of ${g.name} must be a JSON object`);
          await api('PUT', `/groups/${seg(g.name)}/properties`, value);
          say(`Saved the properties of ${g.name}.`);
        }) }, 'Save properties')) : null),
    );
  }

  // Authenticator.manage_groups: memberships follow the authenticator, so the page only shows them
  if (cfg.groupsManaged) {
    $('#create-group').replaceWith(el('p', { class: 'notice', id: 'groups-managed' }, 'Group memberships are managed by the authenticator: they change when people sign in.'));
  }
  $('#create-group')?.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = $('#new-group');
    const name = input.value.trim();
    if (!name) return;
    void act(ev.submitter, async () => {
      await api('POST', `/groups/${seg(name)}`, {});
      input.value = '';
      say(`Created group ${name}.`);
      await loadGroups();
    });
  });
  $('#group-prev').addEventListener('click', () => {
    state.goffset = Math.max(0, state.goffset - GROUP_PAGE);
    writeUrl(true);
    void loadGroups();
  });
  $('#group-next').addEventListener('click', () => {
    state.goffset += GROUP_PAGE;
    writeUrl(true);
    void loadGroups();
  });

  // ---------- views ----------

  function show() {
    const groups = state.view === 'groups';
    usersView.hidden = groups;
    groupsView.hidden = !groups;
    for (const tab of main.querySelectorAll('[data-view]')) tab.setAttribute('aria-selected', String(tab.dataset.view === state.view));
    search.value = state.q;
    onlyActive.checked = state.active;
    pageSize.value = String(state.limit);
    return groups ? loadGroups() : loadUsers();
  }
  for (const tab of main.querySelectorAll('[data-view]')) {
    tab.addEventListener('click', () => {
      state.view = tab.dataset.view;
      writeUrl(true);
      void show();
    });
  }
  window.addEventListener('popstate', () => {
    readUrl();
    void show();
  });

  readUrl();
  void show();
})();
