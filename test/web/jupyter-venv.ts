// What the browser tests that run the established hub's single-user server need: the pinned venv that
// `scripts/setup.mjs --for-tests` makes under .cache/jupyter-6.1 (jupyterhub 6.1.1, JupyterLab 4.6, the idle
// culler 2.0, ipykernel), the spawner options that run it, the servers' own output for a failure's evidence, and
// the end of a system account's processes after its hub stopped.
import test, { type ExecutionContext } from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, sleep, type HubUnderTest } from '../harness.js';
import type { Response } from 'playwright-core';
import { launchBrowser, type Browser, type BrowserContext, type Page } from './browser.js';

export const VENV = join(REPO, '.cache', 'jupyter-6.1');
export const SINGLEUSER = join(VENV, 'bin', 'jupyterhub-singleuser');
export const CULLER = join(VENV, 'bin', 'jupyterhub-idle-culler');

/** The venv must be the one setup pins (its stamp lists the pins); else the test fails saying how to make it. */
export function requireVenv(): void {
  const stamp = join(VENV, '.installed');
  if (!existsSync(stamp) || !existsSync(SINGLEUSER) || !existsSync(CULLER)) {
    throw new Error(`${VENV} is missing or incomplete: run \`node scripts/setup.mjs --for-tests\` (it installs jupyterhub 6.1.1, jupyterlab 4.6.6, jupyterhub-idle-culler 2.0.0 and ipykernel there)`);
  }
}

/**
 * A test file's hooks: the venv checked and one browser launched before its tests, the browser closed and the
 * file's system accounts removed after them. Returns the browser, for the tests.
 */
export function venvBrowser(accounts: { removeAll(): void }): () => Browser {
  let browser: Browser | undefined;
  test.before(async () => {
    requireVenv();
    browser = await launchBrowser();
  });
  test.after.always(async () => {
    await browser?.close();
    accounts.removeAll();
  });
  return () => {
    if (!browser) throw new Error('the browser did not start (see the before hook)');
    return browser;
  };
}

/** What a single-user server is started with: the venv's server, its bin first on PATH (so the kernel is its python), JupyterLab as the landing page (JUPYTERHUB_DEFAULT_URL). */
export function venvSpawnerConfig(): Record<string, unknown> {
  return {
    cmd: [SINGLEUSER], default_url: '/lab', start_timeout: 60, http_timeout: 10, slow_spawn_timeout: 1,
    environment: { PATH: `${join(VENV, 'bin')}:/usr/local/bin:/usr/bin:/bin`, JUPYTERHUB_ACTIVITY_INTERVAL: '1' },
  };
}

/** Every server's own output, by file (the spawner keeps them under <data_dir>/servers/). */
export function serverLogs(hub: HubUnderTest): Array<[string, string]> {
  const dir = join(hub.dataDir, 'servers');
  return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.log')).map((f) => [f, readFileSync(join(dir, f), 'utf8')]) : [];
}

/** The end of the hub's log and of every server's output. */
export function logsOf(hub: HubUnderTest): string {
  const servers = serverLogs(hub).map(([f, text]) => `--- server ${f} ---\n${text.slice(-4000)}`);
  return `--- hub log ---\n${hub.logs().slice(-4000)}\n${servers.join('\n')}`;
}

/**
 * After the hub has stopped: the user's processes end too (kernels run in sessions of their own and end once
 * their server has shut them down, or see it gone), so the account can be removed; what is left after the
 * bound is killed by pid and named.
 */
export async function userProcessesEnd(user: string, t: ExecutionContext): Promise<void> {
  const pids = () => spawnSync('pgrep', ['-u', user], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
  const t0 = Date.now();
  while (pids().length && Date.now() - t0 < 10_000) await sleep(100);
  const left = pids();
  if (!left.length) return;
  const what = spawnSync('ps', ['-o', 'pid,args', '-p', left.join(',')], { encoding: 'utf8' }).stdout;
  for (const pid of left) try { process.kill(pid, 'SIGKILL'); } catch { /* gone meanwhile */ }
  t.log(`processes of ${user} still running 10 s after the hub stopped (killed):\n${what}`);
}

/** Runs `body`; on failure adds a screenshot (to a temp dir) of each page, their errors and the logs to the error. */
export async function withEvidence(t: ExecutionContext, pages: Array<{ page: Page; errors: string[] }>, hub: HubUnderTest, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (e) {
    for (const [i, { page, errors }] of pages.entries()) {
      let shot = '(no screenshot)';
      try {
        shot = join(mkdtempSync(join(tmpdir(), 'browser-test-')), `failure-${i}.png`);
        await page.screenshot({ path: shot, fullPage: true, timeout: 5000 });
      } catch (s) {
        shot = `(screenshot failed: ${(s as Error).message})`;
      }
      t.log(`page ${i} at ${page.url()}; screenshot: ${shot}\npage errors:\n${errors.slice(-20).join('\n')}`);
    }
    t.log(logsOf(hub));
    throw e;
  }
}

/**
 * From JupyterLab's launcher: a new notebook on the venv's Python kernel, once the kernel says Idle (a cell run before
 * it is connected is silently not executed: JupyterLab clears its prompt). `run` types code into the last cell, runs it
 * and returns the text of its output, which comes over the kernel's WebSocket.
 */
export async function newNotebook(page: Page): Promise<{ title: string; run: (code: string) => Promise<string> }> {
  const card = page.locator('.jp-Launcher .jp-LauncherCard[data-category="Notebook"]').first();
  await card.waitFor({ state: 'visible', timeout: 30_000 });
  const title = (await card.getAttribute('title')) ?? (await card.innerText());
  await card.click();
  const notebook = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden)');
  await notebook.locator('.jp-Cell .cm-content').first().waitFor({ state: 'visible', timeout: 30_000 });
  await page.locator('.jp-StatusBar-Widget').getByText(/^Python 3 \(ipykernel\) \| Idle$/).waitFor({ timeout: 45_000 });
  let runs = 0;
  return {
    title,
    async run(code: string): Promise<string> {
      await notebook.locator('.jp-Cell .cm-content').last().click();
      await page.keyboard.type(code);
      await page.keyboard.press('Shift+Enter');
      const output = notebook.locator('.jp-OutputArea-output').nth(runs++);
      await output.waitFor({ state: 'visible', timeout: 45_000 });
      return (await output.innerText()).trim();
    },
  };
}

/**
 * The current notebook saved as `name` through File → Save Notebook As…: JupyterLab 4.6 writes it at the new path (a
 * new file), opens that, and closes the untitled one, asking first whether to save it (it has the run cells):
 * Discard; the new tab carries the name and no unsaved mark. Not Ctrl+S on the untitled file: that asks for a name
 * and *renames* the file (JupyterLab's `renameUntitledFileOnSave`), and the 6.1 stack's jupyter-server answers a
 * directory listing that runs during a rename in that directory with 404 (its async listing stats each entry after
 * reading the names; a standalone loop of renames against listings gave 8 of 296 listings 404): JupyterLab's file
 * browser polls its listing every 10 s and then shows "Directory not found", whose dialog blocks the next click.
 */
export async function saveNotebookAs(page: Page, name: string): Promise<void> {
  await page.locator('#jp-menu-panel .lm-MenuBar-item', { hasText: /^File$/ }).click();
  await page.locator('.lm-Menu-item[data-command="docmanager:save-as"]').click();
  const dialog = page.locator('.jp-Dialog');
  await dialog.locator('input').fill(name);
  await dialog.locator('.jp-Dialog-button.jp-mod-accept').click();
  // done when the untitled tab has gone (an untitled file JupyterLab's autosave wrote meanwhile closes without asking)
  const keepUntitled = page.locator('.jp-Dialog', { hasText: /Save changes in "Untitled\d*\.ipynb" before closing\?/ });
  const untitledTab = page.locator('#jp-main-dock-panel .lm-TabBar-tabLabel', { hasText: /^Untitled\d*\.ipynb$/ });
  const saved = page.locator('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current:not(.jp-mod-dirty)', { hasText: name });
  for (const until = Date.now() + 30_000; await untitledTab.count();) {
    if (Date.now() > until) throw new Error('Save Notebook As: the untitled notebook\'s tab was still open after 30 s');
    if (await keepUntitled.count()) await keepUntitled.locator('.jp-Dialog-button', { hasText: /^Discard$/ }).click();
    else await page.waitForTimeout(100);
  }
  await page.locator('.jp-Dialog').waitFor({ state: 'detached' });
  await saved.waitFor();
}

/** A file's row in JupyterLab's file browser, by its exact name. */
export const fileRow = (page: Page, name: string) =>
  page.locator('.jp-DirListing-item', { has: page.locator('.jp-DirListing-itemText', { hasText: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }) });

/**
 * In JupyterLab's file browser: right-click `name` → Copy Shareable Link; returns what it put on the clipboard,
 * read back as a page's script would (the context was granted clipboard-read).
 */
export async function copyShareableLink(page: Page, name: string): Promise<string> {
  await fileRow(page, name).click({ button: 'right' });
  await page.locator('.lm-Menu-item[data-command="filebrowser:share-main"]').click();
  // the copy happens in the menu's click; the clipboard is read until it holds something (it starts empty)
  const handle = await page.waitForFunction(async () => (await navigator.clipboard.readText()) || null, undefined, { timeout: 5000, polling: 100 });
  return String(await handle.jsonValue());
}

/** Each URL of a navigation, from the first asked to the one answered (the redirects between). */
export function hopsOf(response: Response | null): string[] {
  const hops: string[] = [];
  for (let r = response?.request() ?? null; r; r = r.redirectedFrom()) hops.unshift(r.url());
  return hops;
}

/** One value of JupyterLab's page config (what the single-user server put in the page: hubUser, hubServerUser...). */
export function pageConfig(page: Page, key: string): Promise<unknown> {
  return page.evaluate((k) => (JSON.parse(document.getElementById('jupyter-config-data')?.textContent ?? '{}') as Record<string, unknown>)[k], key);
}

/**
 * Loads that failed without an answer (a refused or reset connection, an aborted navigation) in any page of the
 * context, added to its errors: the evidence when JupyterLab shows a dialog about a request that failed.
 */
export function withFailedLoads<T extends { context: BrowserContext; errors: string[] }>(p: T): T {
  p.context.on('requestfailed', (r) => p.errors.push(`failed ${r.method()} ${r.url()}: ${r.failure()?.errorText ?? '?'}`));
  return p;
}
