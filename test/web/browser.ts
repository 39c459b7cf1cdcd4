// The browser tests' one way to drive a real browser: Debian's chromium (installed by
// `scripts/setup.mjs --for-tests`) through playwright-core. One browser per test file, a fresh context
// (cookies, storage) per test, logins through the hub's own form, screenshots under test-output/.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { REPO } from '../harness.js';

export const CHROMIUM = '/usr/bin/chromium';
export const SCREENSHOT_DIR = join(REPO, 'test-output', 'screenshots');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];

export type { Browser, BrowserContext, Page };

/** Starts chromium; throws (the test fails, never skips) with the reason when it cannot. */
export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run \`node scripts/setup.mjs --for-tests\` (it installs Debian's chromium)`);
  try {
    return await chromium.launch({ executablePath: CHROMIUM, args: ARGS, timeout: 30_000 });
  } catch (e) {
    throw new Error(`chromium could not start: ${(e as Error).message}`);
  }
}

/** A fresh context (no cookies) and a page in it; script errors and failed loads (status ≥ 400) are collected so a test can assert there were none. */
export async function newPage(browser: Browser): Promise<{ context: BrowserContext; page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  context.setDefaultTimeout(15_000);
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // a failed load is listed with its URL (the console's own line for it names none)
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400) errors.push(`${r.status()} ${r.request().method()} ${r.url()}`); });
  return { context, page, errors };
}

/** Logs in through the hub's login form and waits for the page it leads to (home unless `next`). */
export async function login(page: Page, hubUrl: string, username: string, password: string, next = ''): Promise<void> {
  await page.goto(`${hubUrl}/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
  await page.fill('input[name=username]', username);
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForURL((u) => !u.pathname.endsWith('/hub/login')), page.click('button[type=submit]')]);
}

/** Saves the page as test-output/screenshots/<name>.png, for a person to look at. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const path = join(SCREENSHOT_DIR, `${name.replace(/[^A-Za-z0-9_.-]/g, '_')}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}
