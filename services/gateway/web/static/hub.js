// Every hub page's own script, loaded in <head> without `defer` (html.ts): it sets the theme on <html> before
// the body is parsed, so a page is never painted in the other theme first (no inline script: the CSP allows
// only the hub's own files). Once the page is parsed it wires the comforts every page may have:
//   - the top bar's theme choice (system / light / dark), kept in localStorage, followed by other tabs;
//   - a Show button beside each password field (aria-pressed, keyboard-usable as any button);
//   - the login page's warning when it is served over plain HTTP to an address that is not this machine;
//   - forms with data-confirm ask in a dialog first, then submit with confirmed=1 (without this script the
//     server asks on a page of its own instead).
'use strict';
(function () {
  const KEY = 'hub-theme';
  const CHOICES = ['system', 'light', 'dark'];
  const root = document.documentElement;

  function storedTheme() {
    try {
      const v = localStorage.getItem(KEY);
      return CHOICES.includes(v) ? v : 'system';
    } catch (_) {
      return 'system'; // storage refused (privacy settings): the system's choice
    }
  }
  function applyTheme(choice) {
    if (choice === 'light' || choice === 'dark') root.dataset.theme = choice;
    else delete root.dataset.theme;
  }
  applyTheme(storedTheme());

  function themePicker() {
    const select = document.getElementById('theme-choice');
    if (!select) return;
    select.value = storedTheme();
    select.addEventListener('change', function () {
      const choice = CHOICES.includes(select.value) ? select.value : 'system';
      try {
        if (choice === 'system') localStorage.removeItem(KEY);
        else localStorage.setItem(KEY, choice);
      } catch (_) { /* not remembered; this page still follows the choice */ }
      applyTheme(choice);
    });
    // another tab chose: follow it
    window.addEventListener('storage', function (e) {
      if (e.key !== KEY && e.key !== null) return;
      applyTheme(storedTheme());
      select.value = storedTheme();
    });
    select.closest('.theme').hidden = false;
  }

  let fields = 0;
  function passwordToggles() {
    document.querySelectorAll('input[type=password]').forEach(function (input) {
      if (!input.id) input.id = 'password-field-' + ++fields;
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'reveal';
      button.textContent = 'Show';
      // one name, the state in aria-pressed (a screen reader says "Show password, toggle button, pressed")
      button.setAttribute('aria-label', 'Show password');
      button.setAttribute('aria-pressed', 'false');
      button.setAttribute('aria-controls', input.id);
      button.addEventListener('click', function () {
        const shown = input.type === 'password';
        input.type = shown ? 'text' : 'password';
        button.setAttribute('aria-pressed', String(shown));
      });
      // sent as a password field, so password managers and the browser's history treat it as one
      if (input.form) input.form.addEventListener('submit', function () { input.type = 'password'; button.setAttribute('aria-pressed', 'false'); });
      // beside the field; outside its <label>, so the field's name stays the label's text alone
      const label = input.parentElement && input.parentElement.closest('label');
      const anchor = label && label.contains(input) && label.control === input ? label : input;
      const row = document.createElement('span');
      row.className = 'password-field';
      anchor.replaceWith(row);
      row.append(anchor, button);
    });
  }

  /** This machine (plain HTTP is as private as the machine itself): localhost, *.localhost, 127.0.0.0/8, ::1. */
  function isLoopback(host) {
    const h = host.toLowerCase().replace(/\.$/, '');
    return h === 'localhost' || h.endsWith('.localhost') || h === '[::1]' || /^127(\.\d{1,3}){3}$/.test(h);
  }
  function insecureWarning() {
    const warning = document.getElementById('insecure-login-warning');
    if (warning && location.protocol === 'http:' && !isLoopback(location.hostname)) warning.hidden = false;
  }

  /** A modal confirmation, built as the admin page's dialogs are; resolves true on confirm, false on cancel or Escape. */
  function confirmDialog(title, message, label) {
    return new Promise(function (resolve) {
      const dialog = document.createElement('dialog');
      dialog.className = 'hub-dialog';
      dialog.setAttribute('aria-label', title);
      const form = document.createElement('form');
      form.method = 'dialog';
      const h2 = document.createElement('h2');
      h2.textContent = title;
      const p = document.createElement('p');
      p.textContent = message;
      const row = document.createElement('div');
      row.className = 'actions';
      const cancel = document.createElement('button');
      cancel.type = 'button';
      cancel.dataset.action = 'cancel';
      cancel.textContent = 'Cancel';
      const ok = document.createElement('button');
      ok.type = 'submit';
      ok.className = 'danger';
      ok.dataset.action = 'confirm';
      ok.textContent = label;
      row.append(cancel, ok);
      form.append(h2, p, row);
      dialog.append(form);
      const close = function (value) {
        dialog.close();
        dialog.remove();
        resolve(value);
      };
      cancel.addEventListener('click', function () { close(false); });
      ok.addEventListener('click', function (ev) { ev.preventDefault(); close(true); });
      dialog.addEventListener('cancel', function (ev) { ev.preventDefault(); close(false); });
      document.body.append(dialog);
      dialog.showModal(); // the first button (Cancel) has the focus
    });
  }

  function confirmForms() {
    document.querySelectorAll('form[data-confirm]').forEach(function (form) {
      form.addEventListener('submit', function (ev) {
        ev.preventDefault();
        const button = ev.submitter || form.querySelector('button');
        confirmDialog(form.dataset.confirmTitle || 'Are you sure?', form.dataset.confirm, form.dataset.confirmLabel || 'OK').then(function (yes) {
          if (!yes) return;
          let confirmed = form.querySelector('input[name=confirmed]');
          if (!confirmed) {
            confirmed = document.createElement('input');
            confirmed.type = 'hidden';
            confirmed.name = 'confirmed';
            form.append(confirmed);
          }
          confirmed.value = '1';
          if (button) button.disabled = true;
          form.submit(); // no second submit event: asked once
        });
      });
    });
  }

  function comforts() {
    themePicker();
    passwordToggles();
    insecureWarning();
    confirmForms();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', comforts);
  else comforts();
})();
