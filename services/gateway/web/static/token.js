// The token page: copy the new token, revoke tokens and authorized applications through the REST API
// (DELETE /hub/api/users/<name>/tokens/<id>, with the session's XSRF token in X-XSRFToken).
'use strict';
(function () {
  const data = JSON.parse(document.querySelector('main').dataset.page || '{}');
  const copy = document.getElementById('copy-token');
  if (copy) {
    copy.addEventListener('click', function () {
      const text = document.getElementById(copy.dataset.copy).textContent;
      const shown = function () { document.getElementById('copied').classList.remove('hidden'); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(shown, fallback);
      } else {
        fallback();
      }
      function fallback() {
        const range = document.createRange();
        range.selectNodeContents(document.getElementById(copy.dataset.copy));
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        try { if (document.execCommand('copy')) shown(); } catch (_) { /* selected: the person copies by hand */ }
      }
    });
  }
  const error = document.getElementById('revoke-error');
  document.querySelectorAll('button[data-revoke]').forEach(function (button) {
    button.addEventListener('click', async function () {
      if (!window.confirm('Revoke ' + button.dataset.label + '?')) return;
      button.disabled = true;
      try {
        for (const id of button.dataset.revoke.split(' ')) {
          const r = await fetch(data.tokens_url + encodeURIComponent(id), { method: 'DELETE', headers: { 'X-XSRFToken': data.xsrf }, credentials: 'same-origin' });
          if (r.status !== 204 && r.status !== 404) {
            let why = r.statusText;
            try { why = (await r.json()).message || why; } catch (_) { /* not JSON */ }
            throw new Error(why);
          }
        }
        button.closest('tr').remove();
      } catch (e) {
        button.disabled = false;
        error.textContent = 'Could not revoke: ' + e.message;
        error.classList.remove('hidden');
      }
    });
  });
})();
