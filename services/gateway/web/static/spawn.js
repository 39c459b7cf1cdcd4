// The pending page: follows a start over the progress event stream. Each message is shown as it
// arrives (queue positions too); the bar moves with the progress; ready goes to `next` or the server; a failure
// shows its message and Retry. Data comes from <main data-page>, never from inline script.
'use strict';
(function () {
  const main = document.querySelector('main');
  const data = JSON.parse(main.dataset.page || '{}');
  const bar = document.getElementById('progress');
  const message = document.getElementById('progress-message');
  const log = document.getElementById('progress-log');
  const failedBox = document.getElementById('spawn-failed');
  const running = document.getElementById('spawn-running');
  const status = document.getElementById('spawn-status');
  if (data.failed) return;

  function show(e) {
    if (typeof e.progress === 'number') {
      bar.classList.remove('indeterminate');
      bar.firstElementChild.style.width = Math.max(0, Math.min(100, e.progress)) + '%';
      bar.setAttribute('aria-valuenow', String(e.progress));
    }
    if (e.message) {
      message.textContent = e.message;
      const li = document.createElement('li');
      li.textContent = e.message;
      log.appendChild(li);
      log.scrollTop = log.scrollHeight;
    }
  }

  let done = false;
  let lost = 0;
  const MAX_LOST = 5;
  const source = new EventSource(data.progress_url);
  source.onmessage = function (m) {
    let e;
    try { e = JSON.parse(m.data); } catch (_) { return; }
    lost = 0;
    show(e);
    if (e.ready) {
      done = true;
      source.close();
      bar.classList.add('ready');
      status.textContent = 'Ready. Opening your server…';
      // a spawn link's `next` (a local path the hub checked) before the server's own address
      window.location.assign(data.next_url || e.url || data.server_url);
    } else if (e.failed) {
      done = true;
      source.close();
      bar.classList.add('failed');
      bar.firstElementChild.style.width = '100%';
      status.textContent = 'The server could not start.';
      document.querySelector('main h1').textContent = document.title = 'Start failed';
      message.classList.add('hidden');
      document.getElementById('failure-message').textContent = e.message || 'The start failed.';
      failedBox.classList.remove('hidden');
      running.classList.add('hidden');
    }
  };
  source.onerror = function () {
    if (done) return;
    // the stream ended without ready or failed (the server was stopped, or the hub restarted):
    // the page itself knows where the server stands now; ask it again, a few times at most
    if (source.readyState === EventSource.CLOSED || ++lost >= MAX_LOST) {
      source.close();
      const tries = Number(sessionStorage.getItem('hub-pending-reloads') || '0');
      if (tries < MAX_LOST) {
        sessionStorage.setItem('hub-pending-reloads', String(tries + 1));
        setTimeout(function () { window.location.reload(); }, 1000);
      } else {
        sessionStorage.removeItem('hub-pending-reloads');
        status.textContent = 'Lost contact with the hub. Reload this page to try again.';
      }
    }
  };
  window.addEventListener('pageshow', function () { if (done) sessionStorage.removeItem('hub-pending-reloads'); });
})();
